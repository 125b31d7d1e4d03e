#include "agent/agent_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/cluster/emulated_device.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;
using testing::ScratchDir;

// A working agent file; each test changes one line of it.
constexpr char kAgentFile[] = R"(listen: 127.0.0.1:7150
credentials: {ca: ca.pem, cert: agent.pem, key: agent.key, token: token}
work_dir: work
worker: worker.sh
gpus: none
emulated:
  - {type: emu-fast, count: 2, threads: 1, slowdown: 1.0, memory_mib: 48}
  - {type: emu-slow, slowdown: 2.5, memory_mib: 32}
)";

class AgentFile : public ::testing::Test {
 protected:
  AgentFile() {
    const std::string worker = scratch_.Write("worker.sh", "#!/bin/sh\n");
    std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  }
  // kAgentFile with `from` replaced by `to`, written as agent.yaml.
  std::string WriteWith(const std::string& from, const std::string& to) {
    std::string text = kAgentFile;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return scratch_.Write("agent.yaml", text);
  }
  // Loading the file with `from` replaced by `to` fails naming the file, `key` and
  // every one of `words`.
  void ExpectRejected(const std::string& from, const std::string& to, const std::string& key,
                      std::initializer_list<std::string> words) {
    const std::string path = WriteWith(from, to);
    try {
      LoadAgentConfig(path, "");
      ADD_FAILURE() << "accepted " << to;
    } catch (const InputError& error) {
      EXPECT_EQ(error.file(), path);
      EXPECT_EQ(error.key(), key) << error.what();
      for (const std::string& word : words) EXPECT_TRUE(Contains(error.reason(), word)) << error.what();
    }
  }
  ScratchDir scratch_{"poplar_agent_config"};
};

TEST_F(AgentFile, ReadsEveryKeyWithPathsRelativeToTheFile) {
  const AgentConfig config = LoadAgentConfig(WriteWith("", ""), "");
  EXPECT_EQ(config.listen, "127.0.0.1:7150");
  EXPECT_EQ(config.credentials.ca, scratch_.path() + "/ca.pem");
  EXPECT_EQ(config.work_dir, std::filesystem::canonical(scratch_.path() + "/work").string());
  EXPECT_EQ(config.cache_dir, std::filesystem::canonical(scratch_.path() + "/cache").string());
  EXPECT_EQ(config.worker, scratch_.path() + "/worker.sh");
  EXPECT_FALSE(config.discover_gpus);
  ASSERT_EQ(config.emulated.size(), 2u);
  EXPECT_EQ(config.emulated[0].count, 2);
  EXPECT_EQ(config.emulated[0].memory_bytes, std::int64_t{48} << 20);
  EXPECT_EQ(config.emulated[1].count, 1);
  EXPECT_DOUBLE_EQ(config.emulated[1].slowdown, 2.5);
}

// `metrics`: a bare port serves on loopback; an address as written; none: not served.
TEST_F(AgentFile, MetricsAddressDefaultsToLoopback) {
  EXPECT_EQ(LoadAgentConfig(WriteWith("", ""), "").metrics_listen, "");
  EXPECT_EQ(LoadAgentConfig(WriteWith("gpus: none", "gpus: none\nmetrics: 9150"), "").metrics_listen, "127.0.0.1:9150");
  EXPECT_EQ(LoadAgentConfig(WriteWith("gpus: none", "gpus: none\nmetrics: 0.0.0.0:9150"), "").metrics_listen,
            "0.0.0.0:9150");
  ExpectRejected("gpus: none", "gpus: none\nmetrics: 99999", "metrics", {"99999"});
  ExpectRejected("gpus: none", "gpus: none\nmetrics: 127.0.0.1:7150", "metrics", {"the agent's listen address"});
}

// `cpus` binds each device of a type to `threads` CPUs of its own, in turn; the worker
// takes its device's as --cpus. Unbound devices get no flag.
TEST_F(AgentFile, BindsEachDeviceToItsOwnCpus) {
  const AgentConfig config =
      LoadAgentConfig(WriteWith("threads: 1, slowdown: 1.0,", "threads: 2, slowdown: 1.0, cpus: \"4-6,9\","), "");
  const EmulatedDeviceSpec& fast = config.emulated[0];
  EXPECT_EQ(fast.cpus, (std::vector<int>{4, 5, 6, 9}));
  EXPECT_EQ(DeviceCpus(fast, 0), (std::vector<int>{4, 5}));
  EXPECT_EQ(DeviceCpus(fast, 1), (std::vector<int>{6, 9}));
  const std::vector<std::string> flags = EmulatedWorkerFlags(fast, 1, /*training=*/true);
  const auto at = std::find(flags.begin(), flags.end(), "--cpus");
  ASSERT_NE(at, flags.end());
  EXPECT_EQ(*(at + 1), "6,9");
  const std::vector<std::string> unbound = EmulatedWorkerFlags(config.emulated[1], 0, true);
  EXPECT_EQ(std::find(unbound.begin(), unbound.end(), "--cpus"), unbound.end());
  // A declared rate goes to the worker as --gflops.
  const AgentConfig rated = LoadAgentConfig(WriteWith("slowdown: 2.5,", "slowdown: 2.5, gflops: 12.5,"), "");
  EXPECT_DOUBLE_EQ(rated.emulated[1].gflops, 12.5);
  const std::vector<std::string> rated_flags = EmulatedWorkerFlags(rated.emulated[1], 0, false);
  const auto rate = std::find(rated_flags.begin(), rated_flags.end(), "--gflops");
  ASSERT_NE(rate, rated_flags.end());
  EXPECT_EQ(*(rate + 1), "12.5");
  EXPECT_EQ(std::find(flags.begin(), flags.end(), "--gflops"), flags.end());
  // One device, one thread: a bare number.
  EXPECT_EQ(LoadAgentConfig(WriteWith("slowdown: 2.5,", "slowdown: 2.5, cpus: 1,"), "").emulated[1].cpus,
            (std::vector<int>{1}));
}

// Each refusal names the key, the reason, what was written, and its line.
TEST_F(AgentFile, RefusesBadValuesNamingKeyValueAndLine) {
  ExpectRejected("slowdown: 2.5", "slowdown: 0.5", "emulated[1].slowdown",
                 {"a slowdown factor from 1 to 1000, got 0.5", "(line 8)"});
  ExpectRejected("memory_mib: 32", "memory_mib: 0", "emulated[1].memory_mib",
                 {"a number of MiB from 1 to", "got 0", "(line 8)"});
  ExpectRejected("count: 2", "count: 2000", "emulated[0].count", {"from 1 to 1024, got 2000", "(line 7)"});
  ExpectRejected("gpus: none", "gpus: some", "gpus", {"auto or none, got 'some'", "(line 5)"});
  ExpectRejected("worker: worker.sh", "worker: missing.sh", "worker", {"missing.sh", "not an executable", "(line 4)"});
  ExpectRejected("worker: worker.sh", "worker: /tmp", "worker", {"'/tmp' is not an executable", "(line 4)"});
  ExpectRejected("type: emu-slow", "type: emu-fast", "emulated[1].type", {"'emu-fast' is declared twice"});
  ExpectRejected("type: emu-slow", "type: a/b", "emulated[1].type", {"plain name", "'a/b'", "(line 8)"});
  ExpectRejected("127.0.0.1:7150", "127.0.0.1", "listen", {"(line 1)"});
  ExpectRejected("threads: 1,", "thread: 1,", "emulated[0].thread", {"unknown key", "did you mean threads?"});
  ExpectRejected("slowdown: 2.5,", "slowdown: 2.5, gflops: 0,", "emulated[1].gflops", {"a rate in GFLOP/s", "got 0"});
  ExpectRejected("threads: 1,", "threads: 1, cpus: 0,", "emulated[0].cpus", {"names 1 CPUs", "count x threads is 2"});
  ExpectRejected("threads: 1,", "threads: 1, cpus: \"0,0\",", "emulated[0].cpus", {"names CPU 0 twice"});
  ExpectRejected("threads: 1,", "threads: 1, cpus: \"0,-1\",", "emulated[0].cpus", {"'0,-1' is not a list of CPUs"});
  ExpectRejected("threads: 1,", "threads: 1, cpus: \"0,5000\",", "emulated[0].cpus", {"CPU 5000 is above 1023"});
  ExpectRejected("threads: 1,", "threads: 1, cpus: [0, 1],", "emulated[0].cpus", {"must be a CPU or a list"});
  // A folder that takes no files is refused here, naming the file and the key, not at
  // the first profile.
  ExpectRejected("work_dir: work", "work_dir: work\ncache_dir: /proc", "cache_dir",
                 {"cannot write in folder /proc", "takes no new files", "(line 4)"});
  // A path longer than the system takes: named by the key, not in the file system's words.
  ExpectRejected("work_dir: work", "work_dir: " + std::string(300, 'w'), "work_dir", {"is too long", "(line 3)"});
  ExpectRejected("work_dir: work", "work_dir: work\ncache_dir: " + std::string(300, 'c'), "cache_dir", {"is too long"});
  ExpectRejected("worker: worker.sh", "worker: " + std::string(300, 'x'), "worker", {"not an executable"});
}

}  // namespace
}  // namespace poplar
