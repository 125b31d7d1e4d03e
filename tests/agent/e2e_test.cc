// End to end on loopback: real poplar-agent processes with emulated devices, the real
// `poplar` command line, real poplar-worker ranks. Credentials come from
// scripts/make-cluster-credentials, as a user makes them.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "agent/rpc/tls.h"
#include "child_process.h"
#include "planner/base/free_port.h"
#include "planner/base/text_file.h"
#include "planner/cluster/credentials.h"
#include "planner/formats/network.h"
#include "poplar/v1/agent.grpc.pb.h"
#include "test_support.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;
using poplar::testing::ChildOptions;
using poplar::testing::ChildProcess;
using poplar::testing::Command;
using poplar::testing::Contains;
using poplar::testing::ContainsAll;
using poplar::testing::ProcessOutcome;
using poplar::testing::ReadLines;
using poplar::testing::ReadWholeFile;
using poplar::testing::RunProcess;
using poplar::testing::ScratchDir;

struct AgentSpec {
  std::string node;
  std::string type;
  double slowdown;
  int memory_mib;
};

const AgentSpec kAgents[] = {{"a", "emu-fast", 1.0, 48}, {"b", "emu-slow", 3.0, 20}};

bool Alive(int pid) { return pid > 0 && kill(pid, 0) == 0; }

// `text` with the first `from` replaced by `to` (which must be there).
std::string ReplaceOnce(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Two agents on loopback and a cluster file naming them; torn down with the test.
class TwoAgents : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string& root = dir_.path();
    const auto made = RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", root + "/creds",
                                          "--node", "a=127.0.0.1", "--node", "b=127.0.0.1"}),
                                 root);
    ASSERT_EQ(made.exit_code, 0) << made.err;
    // A repeated sentence: the tiny GPT learns it quickly, so the loss visibly falls.
    std::string text;
    while (text.size() < 20000) text += "the quick brown fox jumps over the lazy dog. ";
    for (const auto& spec : kAgents) {
      const std::string work = root + "/" + spec.node + "/work";
      fs::create_directories(work);
      std::ofstream tokens(work + "/tokens.bin", std::ios::binary);
      for (unsigned char c : text) tokens.put(static_cast<char>(c)).put(0);
      tokens.close();
      const std::string config = dir_.Write(
          spec.node + ".yaml",
          "listen: 127.0.0.1:0\n"
          "credentials: {ca: creds/ca.pem, cert: creds/nodes/" +
              spec.node + ".pem, key: creds/nodes/" + spec.node +
              ".key, token: creds/token, crl: creds/crl}\n"
              "work_dir: " +
              spec.node + "/work\n" + (shared_dir_ ? "shared_dir: shared\n" : "") +
              (spec.node == "a" && metrics_port_a_ > 0 ? "metrics: " + std::to_string(metrics_port_a_) + "\n" : "") +
              "worker: " + worker_ +
              "\n"
              "gpus: none\n"
              "emulated:\n  - {type: " +
              spec.type + ", threads: 1, slowdown: " + std::to_string(spec.slowdown) +
              ", memory_mib: " + std::to_string(spec.memory_mib) + (spec.node == "b" ? later_b_ : "") + "}\n");
      ChildOptions options;
      options.argv = {POPLAR_AGENT_BINARY, "--config", config, "--port-file", root + "/" + spec.node + ".port"};
      options.stderr_path = root + "/" + spec.node + ".log";
      agents_.push_back(std::make_unique<ChildProcess>(options));
    }
    for (const auto& spec : kAgents) ports_.push_back(WaitForPort(root + "/" + spec.node + ".port"));
    WriteCluster("cluster.yaml", "creds/token", {});
  }

  static int WaitForPort(const std::string& path) {
    for (int i = 0; i < 300; ++i) {
      if (fs::exists(path)) return std::stoi(ReadTextFile(path));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "agent did not start: " << path;
    return 0;
  }

  // `extra_node` adds a node whose agent address nobody serves; node a has `fast_count`
  // emu-fast devices, and is left out without `with_node_a`.
  std::string WriteCluster(const std::string& name, const std::string& token, const std::string& extra_node,
                           int fast_count = 1, bool with_node_a = true) {
    std::string yaml =
        "name: e2e\n"
        "training: {global_batch: 24, precision: fp32, stage: 2}\n"
        "network:\n  inter_node: {bandwidth_gbps: 20, latency_us: 30}\n  intra_node: {bandwidth_gbps: 20, latency_us: "
        "30}\n"
        "credentials: {ca: creds/ca.pem, cert: creds/head.pem, key: creds/head.key, token: " +
        token +
        "}\n"
        // A warm-up and a decay too slow to matter here, whose rates the launch test reads,
        // and a held-out loss (on the training text: the agents hold no other).
        "job: {model: " POPLAR_SOURCE_DIR
        "/configs/models/gpt-tiny.json, data: tokens.bin, steps: 12, lr: 3e-3, "
        "warmup_steps: 2, lr_decay: linear, decay_steps: 1000, min_lr: 3e-4, checkpoint_every: 5, "
        "eval_data: tokens.bin, eval_every: 5, eval_samples: 8}\n"
        "nodes:\n";
    for (std::size_t i = with_node_a ? 0 : 1; i < 2; ++i) {
      yaml += "  - {name: " + kAgents[i].node + ", host: 127.0.0.1, agent: \"127.0.0.1:" + std::to_string(ports_[i]) +
              "\", devices: [{type: " + kAgents[i].type + ", count: " + std::to_string(i == 0 ? fast_count : 1) +
              "}]}\n";
    }
    yaml += extra_node;
    return dir_.Write(name, yaml);
  }

  // A plan of stage 2 over both agents without profiling: 16 samples on a, 8 on b.
  std::string WritePlan() {
    return dir_.Write("plan.json", R"({"stage": 2, "global_batch": 24, "policy": "poplar", "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device": "cpu:0", "device_type": "emu-fast", "micro_batches": [16]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device": "cpu:0", "device_type": "emu-slow", "micro_batches": [8]}],
      "predicted": {"step_s": 0.05, "samples_per_s": 480}})");
  }

  ProcessOutcome Poplar(std::vector<std::string> args, std::chrono::seconds limit = std::chrono::seconds(240)) {
    args.insert(args.begin(), POPLAR_BINARY);
    ChildOptions options;
    options.argv = args;
    options.cwd = dir_.path();
    return RunProcess(options, dir_.path(), limit);
  }

  // Starts `poplar launch` in the background: of `cluster` with `plan`, by default the
  // fixture's cluster.yaml and WritePlan().
  std::unique_ptr<ChildProcess> StartLaunch(const std::string& run_dir, int steps,
                                            const std::string& cluster = "cluster.yaml", std::string plan = "",
                                            const std::vector<std::string>& extra = {}) {
    if (plan.empty()) plan = WritePlan();
    ChildOptions options;
    options.argv = {POPLAR_BINARY,
                    "launch",
                    cluster,
                    "--plan",
                    plan,
                    "--run-dir",
                    run_dir,
                    "--job-id",
                    "job-" + run_dir,
                    "--steps",
                    std::to_string(steps),
                    "--master-port",
                    std::to_string(poplar::FindFreePort()),
                    "--timeout",
                    "20"};
    options.argv.insert(options.argv.end(), extra.begin(), extra.end());
    options.cwd = dir_.path();
    options.stdout_path = dir_.path() + "/" + run_dir + ".out";
    options.stderr_path = dir_.path() + "/" + run_dir + ".err";
    return std::make_unique<ChildProcess>(options);
  }

  // `poplar launch` of a long job in the background, once both ranks have trained
  // `steps` steps (their pids are -1 if they never did).
  struct Training {
    std::unique_ptr<ChildProcess> launch;
    int rank0 = -1;
    int rank1 = -1;
    bool started() const { return rank0 > 0 && rank1 > 0; }
  };
  Training StartTraining(const std::string& run_dir, int steps, const std::string& cluster = "cluster.yaml") {
    Training training;
    training.launch = StartLaunch(run_dir, 100000, cluster);
    training.rank1 = WaitForSteps(run_dir, 1, steps);
    training.rank0 = WaitForSteps(run_dir, 0, steps);
    return training;
  }

  // Waits until the head has `lines` metrics records of `rank`; returns the rank's pid.
  int WaitForSteps(const std::string& run_dir, int rank, int lines) {
    const std::string metrics = dir_.path() + "/" + run_dir + "/metrics/rank-" + std::to_string(rank) + ".jsonl";
    const std::string log = dir_.path() + "/" + run_dir + "/logs/rank-" + std::to_string(rank) + ".log";
    for (int i = 0; i < 1200; ++i) {
      if (fs::exists(metrics)) {
        const std::string text = ReadWholeFile(metrics);
        if (std::count(text.begin(), text.end(), '\n') >= lines) {
          const std::string first = ReadWholeFile(log);
          const auto at = first.find(": pid ");
          return at == std::string::npos ? -1 : std::stoi(first.substr(at + 6));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "rank " << rank << " never reached " << lines << " steps";
    return -1;
  }

  void StopTheHeadWith(int signal_number, const std::string& how);
  void StopAgentBAndExpectTheHeadToSaySo(Training& training, const std::string& run_dir, std::chrono::seconds limit,
                                         int signal = SIGTERM);

  ScratchDir dir_{"e2e"};
  std::string worker_ = POPLAR_WORKER_BINARY;  // what the agents start
  std::string later_b_;                        // node b's device's `later` emulation, ", later: {...}"
  int metrics_port_a_ = 0;                     // node a's agent file's `metrics` port (0: none)
  bool shared_dir_ = false;                    // both agents keep checkpoints in one shared_dir
  std::vector<std::unique_ptr<ChildProcess>> agents_;
  std::vector<int> ports_;
};

// A second agent on a port or a work_dir an agent holds is refused at start: with gRPC's
// SO_REUSEPORT both would listen, callers reaching either one; and two agents on one
// work_dir would run jobs in the same folders.
TEST_F(TwoAgents, ASecondAgentCannotTakeAnAgentsPortOrWorkDir) {
  const std::string config = ReadTextFile(dir_.path() + "/a.yaml");
  std::string same_port = config;
  same_port.replace(same_port.find("work_dir: a/work"), 16, "work_dir: other/work");
  same_port.replace(same_port.find("127.0.0.1:0"), 11, "127.0.0.1:" + std::to_string(ports_[0]));
  const auto port = RunProcess(Command({POPLAR_AGENT_BINARY, "--config", dir_.Write("same-port.yaml", same_port)}),
                               dir_.path(), std::chrono::seconds(30));
  EXPECT_EQ(port.exit_code, 1);
  EXPECT_TRUE(ContainsAll(
      port.err, {"same-port.yaml: listen: cannot listen on 127.0.0.1:" + std::to_string(ports_[0]), "in use"}))
      << port.err;
  const auto work_dir = RunProcess(Command({POPLAR_AGENT_BINARY, "--config", dir_.Write("same-dir.yaml", config)}),
                                   dir_.path(), std::chrono::seconds(30));
  EXPECT_EQ(work_dir.exit_code, 1);
  EXPECT_TRUE(ContainsAll(work_dir.err, {"same-dir.yaml: work_dir:", "a/work is in use by another poplar-agent (pid ",
                                         "each agent needs a work_dir of its own"}))
      << work_dir.err;
}

TEST_F(TwoAgents, PlanThroughTheAgentsThenLaunchTrainsWithAFallingLoss) {
  const auto status = Poplar({"status", "cluster.yaml"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(ContainsAll(status.out, {"emu-fast (emulated)", "emu-slow (emulated)", "up"}));
  const auto status_json = Poplar({"status", "cluster.yaml", "--json"});
  ASSERT_EQ(status_json.exit_code, 0) << status_json.err;
  const auto nodes = nlohmann::json::parse(status_json.out)["nodes"];  // one document, nothing else
  ASSERT_EQ(nodes.size(), 2u) << status_json.out;
  EXPECT_EQ(nodes[0]["node"], "a");
  EXPECT_EQ(nodes[0]["state"], "up");
  EXPECT_EQ(nodes[1]["devices"][0]["type"], "emu-slow");
  EXPECT_EQ(nodes[1]["devices"][0]["memory_bytes"], 20 << 20);
  EXPECT_TRUE(nodes[1]["jobs"].empty());

  const auto plan = Poplar({"plan", "cluster.yaml", "-o", "plan-agents.json", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_TRUE(Contains(plan.err, "stage 2: measuring on emu-slow"));
  const auto document = nlohmann::json::parse(plan.out);
  int fast = 0, slow = 0;
  for (const auto& rank : document["ranks"]) {
    int samples = 0;
    for (int size : rank["micro_batches"]) samples += size;
    (rank["device_type"] == "emu-fast" ? fast : slow) += samples;
  }
  EXPECT_EQ(fast + slow, 24);
  EXPECT_GT(fast, slow) << "the 3x faster emulated device should get more samples";
  EXPECT_TRUE(fs::exists(dir_.path() + "/profiles/emu-fast.json"));

  const auto again = Poplar({"plan", "cluster.yaml", "-o", "plan-agents.json"});  // agents reuse their cache
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(Contains(again.err, "stage 2: cached"));
  EXPECT_FALSE(Contains(again.err, "measuring"));

  // --type profiles only the types named (from the cache here), and names a type the
  // cluster lacks.
  const auto one_type = Poplar({"profile", "cluster.yaml", "-o", "only-slow", "--type", "emu-slow", "--json"});
  EXPECT_EQ(one_type.exit_code, 0) << one_type.err;
  const auto profiled = nlohmann::json::parse(one_type.out)["profiles"];  // --json: one document
  ASSERT_EQ(profiled.size(), 1u) << one_type.out;
  EXPECT_EQ(profiled[0]["device_type"], "emu-slow");
  EXPECT_EQ(profiled[0]["stages"][0]["stage"], 2);
  EXPECT_TRUE(fs::exists(dir_.path() + "/only-slow/emu-slow.json"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/only-slow/emu-fast.json"));
  EXPECT_FALSE(Contains(one_type.err, "emu-fast")) << one_type.err;
  const auto unknown = Poplar({"profile", "cluster.yaml", "-o", "none", "--type", "emu-fats"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(ContainsAll(unknown.err, {"--type", "'emu-fats' is not a device type", "emu-fast, emu-slow"}))
      << unknown.err;

  // Without --master-port rank 0's agent names a free port: the job trains even with
  // torchrun's customary 29500 taken.
  const poplar::testing::HeldPort customary(29500);
  const auto launch = Poplar({"launch", "cluster.yaml", "--plan", "plan-agents.json", "--run-dir", "run", "--job-id",
                              "train1", "--trace-step", "3"});
  ASSERT_EQ(launch.exit_code, 0) << launch.out << launch.err;
  EXPECT_TRUE(Contains(launch.out, "rendezvous 127.0.0.1:")) << launch.out;
  EXPECT_FALSE(Contains(launch.out, "rendezvous 127.0.0.1:29500;")) << launch.out;
  // `poplar plan` kept the agents' profiles beside the plan; launch checked it against them.
  EXPECT_TRUE(Contains(launch.out, "its micro-batches fit the profiles in ./profiles")) << launch.out;
  EXPECT_TRUE(ContainsAll(launch.out, {"step 10/12", "busy emu-fast", "emu-slow", "trained 12 steps"}));
  const auto summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/run/summary.json"));
  EXPECT_TRUE(summary["ok"].get<bool>());
  EXPECT_EQ(summary["steps"], 12);
  EXPECT_LT(summary["last_loss"].get<double>(), summary["first_loss"].get<double>() - 1.0) << summary.dump();
  // The cluster file's schedule reached the workers: half the rate at the first of 2
  // warm-up steps, then a line from 3e-3 down to 3e-4 over 998 steps.
  const auto rates = ReadLines(dir_.path() + "/run/metrics/rank-1.jsonl");
  ASSERT_EQ(rates.size(), 12u);
  EXPECT_NEAR(nlohmann::json::parse(rates[0])["lr"].get<double>(), 1.5e-3, 1e-12);
  EXPECT_NEAR(nlohmann::json::parse(rates[2])["lr"].get<double>(), 3e-3, 1e-12);
  EXPECT_NEAR(nlohmann::json::parse(rates[11])["lr"].get<double>(), 3e-4 + 2.7e-3 * (1 - 9.0 / 998), 1e-12);
  // The held-out loss after steps 5, 10 and 12, the same on both ranks, shown and summed up.
  const auto rank0 = ReadLines(dir_.path() + "/run/metrics/rank-0.jsonl");
  ASSERT_EQ(rank0.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) {
    const auto a = nlohmann::json::parse(rank0[i]), b = nlohmann::json::parse(rates[i]);
    const bool due = i == 4 || i == 9 || i == 11;
    ASSERT_EQ(a.contains("val_loss"), due) << "step " << i + 1;
    if (due) {
      EXPECT_EQ(a["val_loss"], b.value("val_loss", nlohmann::json())) << "step " << i + 1;
    }
  }
  EXPECT_EQ(summary["val_step"], 12) << summary.dump();
  EXPECT_LT(summary["val_loss"].get<double>(), nlohmann::json::parse(rank0[4])["val_loss"].get<double>());
  EXPECT_TRUE(ContainsAll(launch.out, {"step 5/12  loss", "val loss", ", held-out "})) << launch.out;
  EXPECT_TRUE(fs::exists(dir_.path() + "/run/logs/rank-1.log"));
  EXPECT_TRUE(fs::exists(dir_.path() + "/a/work/jobs/train1/model.pt"));
  EXPECT_TRUE(fs::exists(dir_.path() + "/a/work/jobs/train1/checkpoints/latest"));
  // --trace-step: every rank profiled its 3rd step, its trace kept on its own node.
  for (const auto& [node, rank] : {std::pair{"a", 0}, std::pair{"b", 1}}) {
    const std::string path =
        dir_.path() + "/" + node + "/work/jobs/train1/traces/rank-" + std::to_string(rank) + ".json";
    ASSERT_TRUE(fs::exists(path)) << path;
    const auto trace = nlohmann::json::parse(ReadTextFile(path));
    EXPECT_EQ(trace["step"], 3) << path;
    EXPECT_EQ(trace["rank"], rank) << path;
    EXPECT_FALSE(trace["events"].empty()) << path;
  }

  // The same plan with state shares 3:1 (as the planner writes them, or a user): the
  // head sends them through the agents, the workers hold their shares, and simulate
  // predicts the plan with them.
  auto shared = nlohmann::json::parse(ReadTextFile(dir_.path() + "/plan-agents.json"));
  ASSERT_EQ(shared["stage"], 2);
  for (auto& rank : shared["ranks"]) rank["state_share"] = rank["rank"] == 0 ? 3 : 1;
  dir_.Write("plan-shares.json", shared.dump());
  const auto predicted = Poplar({"simulate", "cluster.yaml", "--plan", "plan-shares.json", "--json"});
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  const auto shares_launch = Poplar({"launch", "cluster.yaml", "--plan", "plan-shares.json", "--run-dir", "run-shares",
                                     "--job-id", "shares", "--steps", "3"});
  ASSERT_EQ(shares_launch.exit_code, 0) << shares_launch.out << shares_launch.err;
  EXPECT_TRUE(Contains(shares_launch.out, "trained 3 steps")) << shares_launch.out;
  std::int64_t state[2] = {0, 0};
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = ReadLines(dir_.path() + "/run-shares/metrics/rank-" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(lines.size(), 3u);
    state[rank] = nlohmann::json::parse(lines.back())["state_bytes"].get<std::int64_t>();
  }
  // Stage 2 at 3:1: both hold the parameters whole, rank 0 three times rank 1's
  // gradients and Adam state.
  EXPECT_GT(state[0], state[1]) << state[0] << " " << state[1];

  // A device that has less memory than its profile was measured with (here the profile
  // says more) is refused before any rank starts, not when its worker runs out of memory.
  auto slow_profile = nlohmann::json::parse(ReadTextFile(dir_.path() + "/profiles/emu-slow.json"));
  slow_profile["memory_bytes"] = std::int64_t{40} << 20;  // the agent's emu-slow has 20 MiB
  dir_.Write("profiles/emu-slow.json", slow_profile.dump(2));
  const auto smaller = Poplar(
      {"launch", "cluster.yaml", "--plan", "plan-agents.json", "--run-dir", "run-smaller", "--job-id", "smaller"});
  EXPECT_EQ(smaller.exit_code, 1);
  EXPECT_TRUE(ContainsAll(smaller.err, {"node 'b': its emu-slow has 20 MiB of memory, but its profile in ./profiles "
                                        "was measured with 40 MiB",
                                        "Profile again"}))
      << smaller.err;
  EXPECT_FALSE(fs::exists(dir_.path() + "/b/work/jobs/smaller")) << "a rank was started";
}

TEST_F(TwoAgents, NetworkMeasuresTheCollectivesAndThePlannerChargesThem) {
  // Outputs that would replace an input, or stand where a file is, are refused first.
  const std::string before = ReadTextFile(dir_.path() + "/cluster.yaml");
  const auto over_cluster = Poplar({"network", "cluster.yaml", "-o", "cluster.yaml"});
  EXPECT_EQ(over_cluster.exit_code, 1);
  EXPECT_TRUE(Contains(over_cluster.err, "--output: cluster.yaml is the cluster file")) << over_cluster.err;
  EXPECT_EQ(ReadTextFile(dir_.path() + "/cluster.yaml"), before);
  dir_.Write("a-file", "x");
  const auto profile_into_file = Poplar({"profile", "cluster.yaml", "-o", "a-file"});
  EXPECT_EQ(profile_into_file.exit_code, 1);
  EXPECT_TRUE(Contains(profile_into_file.err, "a-file is a file, not a folder for the profiles"))
      << profile_into_file.err;
  // No --master-port: rank 0's agent finds one.
  const auto measured = Poplar({"network", "cluster.yaml", "-o", "net.json", "--max-mib", "1", "--timeout", "30"});
  ASSERT_EQ(measured.exit_code, 0) << measured.out << measured.err;
  EXPECT_TRUE(ContainsAll(measured.out, {"2 ranks on 2 nodes over gloo, fp32 payloads", "all_reduce", "reduce_scatter",
                                         "all_gather", "network written to net.json", "measured: net.json"}));
  const MeasuredNetwork network = LoadNetworkFile(dir_.path() + "/net.json");
  EXPECT_EQ(network.world_size(), 2);
  EXPECT_EQ(network.nodes(), 2);
  EXPECT_EQ(network.ranks[1].device_type, "emu-slow");
  EXPECT_EQ(network.backend, "gloo");
  EXPECT_EQ(network.precision, Precision::kFp32);
  EXPECT_EQ(network.points.size(), 3u * 5);  // 4, 16, 64, 256 KiB and 1 MiB
  // The measurements reached the head: the agents keep no folder of the job.
  for (const char* node : {"a", "b"}) {
    const fs::path jobs = dir_.path() + "/" + node + "/work/jobs";
    EXPECT_TRUE(!fs::exists(jobs) || fs::is_empty(jobs)) << node << " kept a network job's folder";
  }

  // The same cluster planning with the measured network: its communication is the
  // measured lines' (stage 2: a reduce-scatter per round, an all-gather per step, and
  // the loop's two scalar all-reduces: loss and gradient norm), the bytes at the pace of
  // the largest state share when the planner splits the states unevenly (N times it).
  const std::string yaml = ReplaceOnce(ReadTextFile(dir_.path() + "/cluster.yaml"),
                                       "network:\n  inter_node: {bandwidth_gbps: 20, latency_us: 30}\n"
                                       "  intra_node: {bandwidth_gbps: 20, latency_us: 30}\n",
                                       "network: {measured: net.json}\n");
  dir_.Write("measured.yaml", yaml);
  const auto plan = Poplar({"plan", "measured.yaml", "-o", "measured-plan.json", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto document = nlohmann::json::parse(plan.out);
  const auto profile = nlohmann::json::parse(ReadTextFile(dir_.path() + "/profiles/emu-fast.json"));
  const double bytes = 4.0 * profile["model"]["params"].get<double>();
  const double rounds = document["ranks"][0]["micro_batches"].size();
  double pace = 1, total = 0, largest = 0;
  for (const auto& rank : document["ranks"]) {
    if (!rank.contains("state_share")) continue;
    total += rank["state_share"].get<double>();
    largest = std::max(largest, rank["state_share"].get<double>());
  }
  if (total > 0) pace = std::max(1.0, 2 * largest / total);
  const auto paced = [&](const CollectiveLine& line) { return line.fixed_s + pace * bytes / line.payload_bytes_per_s; };
  EXPECT_NEAR(document["predicted"]["communication_s"].get<double>(),
              rounds * paced(network.times.reduce_scatter) + paced(network.times.all_gather) +
                  2 * network.times.all_reduce.Seconds(4.0),
              1e-9);

  // --network does the same without editing the cluster file.
  const auto simulated =
      Poplar({"simulate", "cluster.yaml", "--plan", "measured-plan.json", "--network", "net.json", "--json"});
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(simulated.out)["predicted"]["communication_s"].get<double>(),
                   document["predicted"]["communication_s"].get<double>());

  // --network stands in even for a network.measured that no longer fits.
  dir_.Write("stale.yaml", ReplaceOnce(yaml, "measured: net.json", "measured: missing.json"));
  const auto stand_in =
      Poplar({"simulate", "stale.yaml", "--plan", "measured-plan.json", "--network", "net.json", "--json"});
  EXPECT_EQ(stand_in.exit_code, 0) << stand_in.err;

  // A network file from another cluster is refused, naming the key.
  dir_.Write("three.yaml", ReplaceOnce(yaml, "count: 1}]}", "count: 2}]}"));  // a second emu-fast on a
  const auto refused = Poplar({"plan", "three.yaml", "-o", "three-plan.json"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(ContainsAll(refused.err, {"three.yaml", "network.measured", "measured on 2 ranks; this cluster has 3"}))
      << refused.err;
}

TEST_F(TwoAgents, AWorkerKilledWithSigkillEndsTheRunCleanly) {
  Training training = StartTraining("killed", 6);
  ASSERT_TRUE(training.started());
  kill(training.rank1, SIGKILL);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 1);
  const std::string err = ReadWholeFile(dir_.path() + "/killed.err");
  EXPECT_TRUE(
      ContainsAll(err, {"node 'b': rank 1 was killed by signal 9", "every worker was stopped",
                        "checkpoints rank 0's node completed (every 5 steps) stay in", "jobs/job-killed/checkpoints"}))
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(Alive(training.rank1));
  EXPECT_FALSE(Alive(training.rank0));
  // The last complete checkpoint stays.
  const std::string checkpoints = dir_.path() + "/a/work/jobs/job-killed/checkpoints/";
  const std::string latest = ReadTextFile(checkpoints + "latest");
  EXPECT_TRUE(fs::exists(checkpoints + latest.substr(0, latest.find('\n')))) << latest;
  // Both agents are still serving.
  EXPECT_EQ(Poplar({"status", "cluster.yaml"}).exit_code, 0);
}

TEST_F(TwoAgents, AKilledAgentTakesItsWorkersWithIt) {
  Training training = StartTraining("agentdeath", 3);
  ASSERT_TRUE(training.started());
  agents_[1]->Signal(SIGKILL);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 1);
  const std::string err = ReadWholeFile(dir_.path() + "/agentdeath.err");
  // The lost agent is the cause; not node a's stop, nor a TLS hint.
  EXPECT_TRUE(Contains(err, "failed: node 'b': lost its agent at")) << err;
  EXPECT_FALSE(Contains(err, "failed elsewhere")) << err;
  EXPECT_FALSE(Contains(err, "CA match")) << err;
  for (int i = 0; i < 50 && (Alive(training.rank1) || Alive(training.rank0)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(Alive(training.rank1)) << "a worker outlived its agent";
  EXPECT_FALSE(Alive(training.rank0));
}

// systemctl stop: the agent stops its job and says why before it exits, rather than die
// of the signal on a gRPC thread, unexplained.
TEST_F(TwoAgents, AnAgentStoppedWithSigtermSaysSo) {
  Training training = StartTraining("agentstop", 3);
  ASSERT_TRUE(training.started());
  StopAgentBAndExpectTheHeadToSaySo(training, "agentstop", std::chrono::seconds(60));
}

// SIGHUP, as the closing terminal of an agent started by hand sends, is a stop like
// SIGTERM: the agent stops its job and the head says why, not that it lost the agent.
TEST_F(TwoAgents, AnAgentWhoseTerminalClosesStopsItsJobAndSaysSo) {
  Training training = StartTraining("agenthup", 3);
  ASSERT_TRUE(training.started());
  StopAgentBAndExpectTheHeadToSaySo(training, "agenthup", std::chrono::seconds(60), SIGHUP);
}

// SIGTERM to node b's agent, as systemctl stop sends: the launch of `run_dir` must end
// within `limit` with exit 1, saying so, and b's rank must be gone.
void TwoAgents::StopAgentBAndExpectTheHeadToSaySo(Training& training, const std::string& run_dir,
                                                  std::chrono::seconds limit, int signal) {
  agents_[1]->Signal(signal);
  EXPECT_EQ(training.launch->Wait(limit), 1);
  const std::string err = ReadWholeFile(dir_.path() + "/" + run_dir + ".err");
  EXPECT_TRUE(Contains(err, std::string("failed: node 'b': its poplar-agent was stopped (") + strsignal(signal) + ")"))
      << err;
  EXPECT_FALSE(Alive(training.rank1));
}

// Agents whose ranks take 60 s to end once stopped, as a rank 0 finishing a large
// checkpoint on a slow disk would: a shell around poplar-worker that waits that long
// after its SIGTERM (the worker itself, in the same process group, ends at once).
class SlowToStopWorkers : public TwoAgents {
 protected:
  SlowToStopWorkers() {
    worker_ = dir_.Write("slow-to-stop-worker",
                         "#!/bin/sh\n"
                         "trap 'sleep 60; exit 0' TERM\n" POPLAR_WORKER_BINARY
                         " \"$@\" &\n"
                         "wait $!\n");
    fs::permissions(worker_, fs::perms::owner_all);
  }
  // A long job of the fixture's cluster with job.stop_grace_s `grace_s`, once both ranks
  // have trained 2 steps.
  Training StartWithGrace(const std::string& run_dir, int grace_s) {
    dir_.Write(run_dir + ".yaml", ReplaceOnce(ReadWholeFile(dir_.path() + "/cluster.yaml"), "checkpoint_every: 5,",
                                              "checkpoint_every: 5, stop_grace_s: " + std::to_string(grace_s) + ","));
    return StartTraining(run_dir, 2, run_dir + ".yaml");
  }
};

// The job's stop grace (job.stop_grace_s), not a fixed 30 s, is how long a stopped rank
// may take: the agents SIGKILL the ranks once 2 s are over, and the head says so.
TEST_F(SlowToStopWorkers, TheJobsStopGraceBoundsHowLongAStoppedRankMayTake) {
  Training training = StartWithGrace("grace", 2);
  ASSERT_TRUE(training.started());
  const auto stop = std::chrono::steady_clock::now();
  training.launch->Signal(SIGINT);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 130);
  const auto took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - stop).count();
  EXPECT_GE(took_ms, 2000) << "the ranks were not given their grace";
  EXPECT_LT(took_ms, 20000) << "the agents waited longer than the job's stop grace of 2 s";
  const std::string log = ReadWholeFile(dir_.path() + "/grace/logs/rank-0.log");
  EXPECT_TRUE(Contains(log, "by its agent, the stop's grace over")) << log;
  EXPECT_FALSE(Alive(training.rank0));
  EXPECT_FALSE(Alive(training.rank1));
}

// systemctl stop of an agent whose ranks take their grace (14 s here) to end: its Launch
// stream stays open until they have, so the head hears why the job ended rather than
// reporting a lost agent.
TEST_F(SlowToStopWorkers, AStoppedAgentAnswersUntilItsRanksHaveEnded) {
  Training training = StartWithGrace("agentgrace", 14);
  ASSERT_TRUE(training.started());
  StopAgentBAndExpectTheHeadToSaySo(training, "agentgrace", std::chrono::seconds(90));
}

// The nodes share no file system: the checkpoints are on rank 0's node only, and the
// other node's rank receives the state from the rank that has them when the job
// resumes, rank 0 or, after a re-plan that moved rank 0, another.
TEST_F(TwoAgents, AJobResumesAcrossNodesFromTheNodeWithTheCheckpoints) {
  const std::string plan = WritePlan();
  const std::string port = std::to_string(poplar::FindFreePort());
  const auto first = Poplar({"launch", "cluster.yaml", "--plan", plan, "--run-dir", "resumable", "--job-id",
                             "resumable", "--master-port", port});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_TRUE(fs::exists(dir_.path() + "/a/work/jobs/resumable/checkpoints/latest"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/b/work/jobs/resumable/checkpoints/latest"));

  const auto resumed = Poplar({"launch", "cluster.yaml", "--plan", plan, "--run-dir", "resumable", "--job-id",
                               "resumable", "--master-port", port, "--resume", "--steps", "16"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_TRUE(ContainsAll(resumed.out, {"resumed from the checkpoint of step 12", "trained steps 13-16:"}))
      << resumed.out;
  // More steps on a schedule whose decay_steps is set: the training goes on unchanged.
  EXPECT_FALSE(Contains(resumed.out + resumed.err, "warning")) << resumed.out << resumed.err;
  // Rank 1, on the node without checkpoints, went on from step 12, not from scratch.
  const auto lines = ReadLines(dir_.path() + "/resumable/metrics/rank-1.jsonl");
  // The run directory's metrics: 12 lines from the first launch, 4 from the second.
  ASSERT_EQ(lines.size(), 16u) << resumed.out;
  EXPECT_EQ(nlohmann::json::parse(lines[12])["step"], 13) << lines[12];
  const auto summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/resumable/summary.json"));
  EXPECT_TRUE(summary["ok"].get<bool>()) << summary.dump();
  EXPECT_EQ(summary["first_step"], 13) << summary.dump();
  // The first attempt's plan and summary are kept, not replaced.
  EXPECT_TRUE(Contains(resumed.out, "kept in resumable/attempts/1")) << resumed.out;
  const auto first_summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/resumable/attempts/1/summary.json"));
  EXPECT_EQ(first_summary["steps"], 12) << first_summary.dump();
  EXPECT_TRUE(fs::exists(dir_.path() + "/resumable/attempts/1/plan.json"));

  // Another job cannot resume into this run directory.
  const auto other = Poplar({"launch", "cluster.yaml", "--plan", plan, "--run-dir", "resumable", "--job-id", "other",
                             "--master-port", port, "--resume"});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_TRUE(ContainsAll(other.err, {"--run-dir", "job 'resumable'", "not of job 'other'"})) << other.err;

  // Re-planned with node b first: rank 0 now runs where no checkpoint is, and rank 1,
  // on node a, sends the state of step 16. The peak rate lowered too: the worker that
  // read the checkpoint says so, and the head shows it.
  std::string swapped = ReadTextFile(dir_.path() + "/cluster.yaml");
  ASSERT_NE(swapped.find("lr: 3e-3"), std::string::npos);
  swapped.replace(swapped.find("lr: 3e-3"), 8, "lr: 2e-3");
  const auto a_line = swapped.find("  - {name: a,");
  const auto b_line = swapped.find("  - {name: b,");
  ASSERT_LT(a_line, b_line);
  const std::string a_node = swapped.substr(a_line, b_line - a_line);
  swapped.erase(a_line, a_node.size());
  swapped += a_node;
  dir_.Write("b-first.yaml", swapped);
  const std::string b_first_plan = dir_.Write("b-first-plan.json", R"({"stage": 2, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "b", "host": "127.0.0.1", "device": "cpu:0", "device_type": "emu-slow", "micro_batches": [8]},
      {"rank": 1, "node": "a", "host": "127.0.0.1", "device": "cpu:0", "device_type": "emu-fast", "micro_batches": [16]}]})");
  const auto moved = Poplar({"launch", "b-first.yaml", "--plan", b_first_plan, "--run-dir", "resumable", "--job-id",
                             "resumable", "--resume", "--steps", "18"});
  ASSERT_EQ(moved.exit_code, 0) << moved.out << moved.err;
  EXPECT_TRUE(ContainsAll(moved.out, {"node 'a': poplar-worker[rank 1]: warning: --resume", "goes on from step 16",
                                      "lr: 0.003 then, 0.002 now", "the learning rate of step 17"}))
      << moved.out;
  const auto moved_lines = ReadLines(dir_.path() + "/resumable/metrics/rank-0.jsonl");
  ASSERT_EQ(moved_lines.size(), 18u);
  EXPECT_EQ(nlohmann::json::parse(moved_lines[16])["step"], 17) << moved_lines[16];
  // Rank 0 now writes the checkpoints, on node b.
  EXPECT_EQ(ReadTextFile(dir_.path() + "/b/work/jobs/resumable/checkpoints/latest"), "step-00000018\n");

  // A resume with no checkpoint anywhere starts over, and says so.
  const auto fresh =
      Poplar({"launch", "cluster.yaml", "--plan", plan, "--job-id", "fresh", "--resume", "--steps", "2"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.out << fresh.err;
  EXPECT_TRUE(ContainsAll(fresh.out,
                          {"no node held a checkpoint of job fresh: training starts from step 0", "trained 2 steps"}))
      << fresh.out;
}

// A running job takes other micro-batches between two steps (`poplar switch`): a rank
// drops to no samples and comes back, and the training is the uninterrupted run's. A
// plan the job cannot take is refused and the job goes on.
TEST_F(TwoAgents, APlanSwitchedMidRunTrainsAsTheUninterruptedRun) {
  constexpr int kSteps = 30;
  const std::string plan = WritePlan();
  const auto steady =
      Poplar({"launch", "cluster.yaml", "--plan", plan, "--run-dir", "steady", "--job-id", "steady", "--steps",
              std::to_string(kSteps), "--master-port", std::to_string(poplar::FindFreePort()), "--json"});
  ASSERT_EQ(steady.exit_code, 0) << steady.out << steady.err;
  // --json: the summary alone on stdout, the progress on stderr.
  const auto steady_summary = nlohmann::json::parse(steady.out);
  EXPECT_TRUE(steady_summary["ok"].get<bool>());
  EXPECT_EQ(steady_summary["steps"], kSteps);
  EXPECT_TRUE(ContainsAll(steady.err, {"launching job steady", "trained 30 steps"})) << steady.err;

  const auto switch_to = [&](const std::string& file, const std::string& reason) {
    return Poplar({"switch", "cluster.yaml", "--job-id", "job-switched", "--plan", file, "--reason", reason});
  };
  const std::string slow_does_more = dir_.Write("slow-does-more.json", R"({"stage": 2, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [4]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [20]}],
      "predicted": {"step_s": 0.2}})");
  const std::string slow_idle = dir_.Write("slow-idle.json", R"({"stage": 2, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [12, 12]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [0, 0]}]})");
  const std::string other_stage = dir_.Write("other-stage.json", R"({"stage": 3, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [16]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [8]}]})");

  Training training;
  training.launch = StartLaunch("switched", kSteps);
  training.rank0 = WaitForSteps("switched", 0, 2);
  ASSERT_TRUE(training.rank0 > 0);
  const auto refused = switch_to(other_stage, "another stage");
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_TRUE(ContainsAll(refused.err, {"the plan was not switched",
                                        "stage: is 3 but the running job trains at ZeRO "
                                        "stage 2"}))
      << refused.err;
  const auto first = switch_to(slow_does_more, "the slow device takes more");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_TRUE(Contains(first.out, "plan 1 (")) << first.out;
  const std::string metrics = dir_.path() + "/switched/metrics/rank-0.jsonl";
  const auto trained_with = [&](int number) {
    for (int i = 0; i < 600; ++i) {
      for (const std::string& line : ReadLines(metrics)) {
        if (nlohmann::json::parse(line).value("plan", 0) == number) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  ASSERT_TRUE(trained_with(1));
  const auto second = switch_to(slow_idle, "the slow device rests");
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  ASSERT_EQ(training.launch->Wait(std::chrono::seconds(240)), 0) << ReadWholeFile(dir_.path() + "/switched.out");
  const std::string out = ReadWholeFile(dir_.path() + "/switched.out");
  EXPECT_TRUE(ContainsAll(out, {"plan 1 handed to rank 0: the slow device takes more",
                                "plan 1 trains from here, "
                                "predicted 200.0 ms per step (was 50.0 ms): the slow device takes more",
                                "plan 2 trains from here"}))
      << out;

  // Step by step the loss is the uninterrupted run's, and each rank trained the samples
  // of the plan its record names.
  const auto expected = ReadLines(dir_.path() + "/steady/metrics/rank-0.jsonl");
  const auto actual = ReadLines(metrics);
  const auto rank1 = ReadLines(dir_.path() + "/switched/metrics/rank-1.jsonl");
  ASSERT_EQ(actual.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(expected.size(), actual.size());
  ASSERT_EQ(rank1.size(), actual.size());
  std::set<int> plans;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const auto a = nlohmann::json::parse(expected[i]), b = nlohmann::json::parse(actual[i]);
    const auto b1 = nlohmann::json::parse(rank1[i]);
    // Float rounding of another order of sums, which AdamW on this overfitting model
    // grows tenfold every ten steps: 1e-7 by step 20, 6e-6 to 3e-5 by step 30 (switches
    // at steps 7 to 9 and 10 to 11), 5e-5 to 3e-4 by step 40. Far below what one sample
    // trained twice or skipped would move.
    EXPECT_NEAR(b["loss"].get<double>(), a["loss"].get<double>(), 3e-4 * a["loss"].get<double>()) << "step " << i + 1;
    const int number = b["plan"].get<int>();
    plans.insert(number);
    EXPECT_EQ(b1["plan"], number) << "step " << i + 1;
    const std::vector<int> rank1_samples = {8, 20, 0};
    EXPECT_EQ(b1["samples"], rank1_samples.at(number)) << "step " << i + 1;
  }
  EXPECT_EQ(plans, (std::set<int>{0, 1, 2}));
  const auto summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/switched/summary.json"));
  EXPECT_NEAR(summary["val_loss"].get<double>(),
              nlohmann::json::parse(ReadTextFile(dir_.path() + "/steady/summary.json"))["val_loss"].get<double>(),
              3e-4 * summary["val_loss"].get<double>());
  std::cout << "plan switches: " << summary["plan_switches"].dump() << "\n";
  ASSERT_EQ(summary["plan_switches"].size(), 2u) << summary.dump();
  EXPECT_EQ(summary["plan_switches"][1]["reason"], "the slow device rests");
  EXPECT_TRUE(fs::exists(dir_.path() + "/switched/plans/plan-2.json"));
  EXPECT_EQ(nlohmann::json::parse(ReadTextFile(dir_.path() + "/switched/plan_switches.json")),
            summary["plan_switches"]);

  // No such job now.
  const auto gone = switch_to(slow_idle, "too late");
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_TRUE(Contains(gone.err, "no training job 'job-switched' runs on this node")) << gone.err;
}

// job.batch: adaptive: the head judges the batch every 4 steps from the ranks' noise
// scale and the planner's predictions, and hands the plan of a better batch to the job
// between steps; every step trains a batch within the bounds, each starting where the
// last ended, and every judgement is in the run directory. --timeline draws every
// rank's steps; the summary names each plan's straggler.
TEST_F(TwoAgents, AnAdaptiveBatchIsChosenBetweenStepsWithinItsBounds) {
  std::string yaml = ReadTextFile(dir_.path() + "/cluster.yaml");
  const std::string every = "checkpoint_every: 5,";
  ASSERT_NE(yaml.find(every), std::string::npos);
  yaml.replace(yaml.find(every), every.size(), "batch: adaptive, batch_min: 8, batch_max: 64, batch_every: 4,");
  dir_.Write("adaptive.yaml", yaml);
  // A switch to a batch beyond the bounds is refused before any agent is asked.
  const auto beyond = Poplar({"switch", "adaptive.yaml", "--job-id", "adaptive", "--plan",
                              dir_.Write("beyond.json", R"({"stage": 2, "global_batch": 100, "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [60]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [40]}]})")});
  EXPECT_EQ(beyond.exit_code, 1);
  EXPECT_TRUE(ContainsAll(beyond.err, {"beyond.json: global_batch: is 100, outside the job's adaptive batch bounds 8 "
                                       "to 64 (adaptive.yaml: job.batch_min, job.batch_max)"}))
      << beyond.err;
  const auto plan = Poplar({"plan", "adaptive.yaml", "-o", "plan-adaptive.json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const auto launch =
      Poplar({"launch", "adaptive.yaml", "--plan", "plan-adaptive.json", "--run-dir", "run", "--job-id", "adaptive",
              "--steps", "32", "--rebalance", "off", "--progress-every", "0", "--timeline"});
  ASSERT_EQ(launch.exit_code, 0) << launch.out << launch.err;
  EXPECT_TRUE(Contains(launch.out, "adaptive batch: 8 to 64 samples, chosen for goodput every 4 steps (from 24)"))
      << launch.out;
  nlohmann::json judgements = nlohmann::json::array();
  for (const std::string& line : ReadLines(dir_.path() + "/run/batch_choices.jsonl")) {
    judgements.push_back(nlohmann::json::parse(line));
  }
  std::cout << "judgements: " << judgements.dump() << "\n";
  ASSERT_GE(judgements.size(), 4u) << judgements.dump();
  for (const auto& judgement : judgements) {
    EXPECT_GE(judgement["chosen"].get<int>(), 8) << judgement.dump();
    EXPECT_LE(judgement["chosen"].get<int>(), 64) << judgement.dump();
    if (judgement["noise_scale"].get<double>() > 0) {
      EXPECT_GE(judgement["candidates"].size(), 8u) << judgement.dump();
    }
  }
  // Step by step: a batch within the bounds, starting where the last ended; a change
  // of batch only where a plan the chooser handed took over.
  const auto summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/run/summary.json"));
  std::int64_t next_sample = 0, batch = 24;
  int changes = 0;
  for (const std::string& line : ReadLines(dir_.path() + "/run/metrics/rank-0.jsonl")) {
    const auto record = nlohmann::json::parse(line);
    EXPECT_EQ(record["first_sample"], next_sample) << line;
    const std::int64_t now = record["global_batch"];
    EXPECT_GE(now, 8) << line;
    EXPECT_LE(now, 64) << line;
    changes += now != batch;
    batch = now;
    next_sample += now;
  }
  EXPECT_EQ(next_sample > 0, true);
  ASSERT_EQ(summary["plan_switches"].size(), static_cast<std::size_t>(changes)) << summary.dump();
  for (const auto& entry : summary["plan_switches"]) {
    EXPECT_TRUE(Contains(entry["reason"].get<std::string>(), "adaptive batch: noise scale")) << entry.dump();
  }

  // --timeline: a track per rank with each of its 32 steps; the straggler of each plan.
  const auto trace = nlohmann::json::parse(ReadTextFile(dir_.path() + "/run/timeline.json"));
  std::map<int, int> steps_of;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X" && event["name"].get<std::string>().rfind("step ", 0) == 0) ++steps_of[event["tid"]];
  }
  EXPECT_EQ(steps_of, (std::map<int, int>{{0, 32}, {1, 32}}));
  EXPECT_TRUE(ContainsAll(launch.out, {"straggler", "timeline.json"})) << launch.out;
  ASSERT_EQ(summary["stragglers"].size(), static_cast<std::size_t>(changes + 1)) << summary.dump();
  for (const auto& entry : summary["stragglers"]) EXPECT_TRUE(entry.contains("straggler")) << entry.dump();
}

// What GET /metrics on 127.0.0.1:`port` answers, headers and body ("" when nothing listens).
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t got; (got = read(fd, buffer, sizeof(buffer))) > 0;) answer.append(buffer, got);
    }
  }
  close(fd);
  return answer;
}

// Node a's agent serves Prometheus metrics (its agent file's `metrics`): its device, the
// job holding it and the job's rank on it, step by step; after the job, the device is free.
class ScrapedAgent : public TwoAgents {
 protected:
  ScrapedAgent() { metrics_port_a_ = poplar::FindFreePort(); }
};

TEST_F(ScrapedAgent, ServesItsDevicesAndItsRanksSteps) {
  const std::string idle = Scrape(metrics_port_a_);
  EXPECT_TRUE(ContainsAll(
      idle, {"HTTP/1.1 200 OK", "Content-Type: text/plain; version=0.0.4", "# TYPE poplar_device_busy gauge",
             "device=\"emu-fast 0\",type=\"emu-fast\"} 0", "poplar_device_memory_bytes{"}))
      << idle;
  Training training = StartTraining("scraped", 3);
  ASSERT_TRUE(training.started());
  const std::string busy = Scrape(metrics_port_a_);
  training.launch->Signal(SIGINT);  // Ctrl-C: the job stops everywhere
  training.launch->Wait(std::chrono::seconds(60));
  EXPECT_TRUE(ContainsAll(
      busy, {"device=\"emu-fast 0\",type=\"emu-fast\"} 1", "type=\"emu-fast\",job=\"job-scraped\"} 1",
             "poplar_rank_step{", "job=\"job-scraped\",rank=\"0\"}", "poplar_rank_idle_seconds{", "poplar_rank_loss{"}))
      << busy;
  EXPECT_FALSE(Contains(busy, "rank=\"1\"")) << "rank 1 runs on node b: " << busy;
  // The step it reports is one rank 0 trained.
  const std::string key = "poplar_rank_step{";
  const auto at = busy.find(key);
  ASSERT_NE(at, std::string::npos);
  const auto value = busy.find("} ", at);
  EXPECT_GE(std::stod(busy.substr(value + 2)), 3.0) << busy;
  for (int i = 0; i < 200 && Contains(Scrape(metrics_port_a_), "job-scraped"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string after = Scrape(metrics_port_a_);
  EXPECT_TRUE(Contains(after, "type=\"emu-fast\"} 0")) << after;
  EXPECT_FALSE(Contains(after, "job-scraped")) << after;
}

// A device that slows down in the middle of a run (the emulation's `later`: node b's
// from 3x to 12x from step 6) is noticed against its profile, and the head moves work
// off it between steps (the rebalancer), naming why.
class ThrottlingDevice : public TwoAgents {
 protected:
  ThrottlingDevice() { later_b_ = ", later: {step: 6, slowdown: 12}"; }
};

TEST_F(ThrottlingDevice, IsNoticedAndRebalancedBetweenSteps) {
  const auto plan = Poplar({"plan", "cluster.yaml", "-o", "plan-agents.json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  // A switch to a plan for other devices (the ranks swapped) is refused before any agent
  // is asked.
  const auto swapped = Poplar({"switch", "cluster.yaml", "--job-id", "throttled", "--plan",
                               dir_.Write("swapped.json", R"({"stage": 2, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [8]},
      {"rank": 1, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [16]}]})")});
  EXPECT_EQ(swapped.exit_code, 1);
  EXPECT_TRUE(ContainsAll(swapped.err, {"swapped.json", "ranks[0]"})) << swapped.err;
  // A plan that gives the slow device work whatever the profiles measured under the
  // suite's load made of it, beside them (./profiles, which the rebalancer compares with).
  const std::string start = dir_.Write("start.json", R"({"stage": 2, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [16]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [8]}]})");
  const auto launch = Poplar({"launch", "cluster.yaml", "--plan", start, "--run-dir", "run", "--job-id", "throttled",
                              "--steps", "40", "--rebalance-window", "4", "--progress-every", "0"});
  ASSERT_EQ(launch.exit_code, 0) << launch.out << launch.err;
  EXPECT_TRUE(ContainsAll(launch.out, {"rebalancing: on",
                                       "handed to rank 0: rebalanced: compute against the "
                                       "profiles (median of 4 steps)"}))
      << launch.out;
  const auto summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/run/summary.json"));
  // Every judgement is on record; the one that proposed the switch says so.
  const std::string judgements = ReadWholeFile(dir_.path() + "/run/rebalance_judgements.jsonl");
  EXPECT_TRUE(Contains(judgements, "\"outcome\":\"proposed: the running plan takes")) << judgements;
  // A switch after the slowdown, for it.
  int noticed_from = 0;
  for (const auto& entry : summary["plan_switches"]) {
    // The throttle puts emu-slow at 4x its profile; a machine under load alone (the suite's)
    // has read up to 2x.
    const std::string reason = entry["reason"];
    const auto at = reason.find("emu-slow ");
    const double ratio = at == std::string::npos ? 0 : std::stod(reason.substr(at + 9));
    if (noticed_from == 0 && entry["from_step"].get<int>() > 6 && ratio >= 3) noticed_from = entry["from_step"];
  }
  ASSERT_GT(noticed_from, 0) << summary["plan_switches"].dump(2) << launch.out << judgements;
  // That switch moved work off emu-slow (rank 1): its samples in the step before it (the
  // plan it was throttled under; under load an earlier switch may have changed the
  // starting plan's) against its last step's.
  const auto lines = ReadLines(dir_.path() + "/run/metrics/rank-1.jsonl");
  ASSERT_EQ(lines.size(), 40u);
  const int before = nlohmann::json::parse(lines[noticed_from - 2])["samples"];
  EXPECT_LT(nlohmann::json::parse(lines.back())["samples"].get<int>(), before) << launch.out;
}

// --elastic: a failure (a rank, an agent, a whole node lost) ends in a run resumed from
// the newest checkpoint over the nodes whose agents answer, with no process left behind
// and every step trained. Both agents keep checkpoints in one shared_dir, as nodes with a
// shared file system do, so that losing rank 0's node loses none.
class ElasticJob : public TwoAgents {
 protected:
  static constexpr int kSteps = 30;  // checkpoints every 5 (the fixture's job)
  ElasticJob() { shared_dir_ = true; }

  // `poplar launch --elastic` of `total` steps, once both ranks have trained `steps`.
  Training StartElastic(const std::string& run_dir, int steps, int total = kSteps) {
    Training training;
    training.launch = StartLaunch(run_dir, total, "cluster.yaml", "", {"--elastic"});
    training.rank1 = WaitForSteps(run_dir, 1, steps);
    training.rank0 = WaitForSteps(run_dir, 0, steps);
    return training;
  }

  // The launch ended well: every step trained, rank 0's last record of step kSteps on
  // `world_size` ranks, resumed from a checkpoint, and the killed attempt's ranks gone.
  std::string ExpectTrainedToTheEnd(const std::string& run_dir, Training& training, int world_size,
                                    int total = kSteps) {
    EXPECT_EQ(training.launch->Wait(std::chrono::seconds(180)), 0);
    const std::string out = ReadWholeFile(dir_.path() + "/" + run_dir + ".out");
    EXPECT_TRUE(ContainsAll(
        out, {"elastic: job job-" + run_dir, "restart 1 of 3", "resumed from the checkpoint of step", "trained steps"}))
        << out << ReadWholeFile(dir_.path() + "/" + run_dir + ".err");
    const auto lines = ReadLines(dir_.path() + "/" + run_dir + "/metrics/rank-0.jsonl");
    EXPECT_FALSE(lines.empty());
    if (!lines.empty()) {
      const auto last = nlohmann::json::parse(lines.back());
      EXPECT_EQ(last["step"], total);
      EXPECT_EQ(last["world_size"], world_size);
    }
    const auto summary = nlohmann::json::parse(ReadTextFile(dir_.path() + "/" + run_dir + "/summary.json"));
    EXPECT_TRUE(summary["ok"].get<bool>()) << summary.dump();
    EXPECT_TRUE(fs::exists(dir_.path() + "/" + run_dir + "/attempts/1/summary.json"));
    for (int i = 0; i < 50 && (Alive(training.rank1) || Alive(training.rank0)); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_FALSE(Alive(training.rank0)) << "the failed attempt's rank 0 is still running";
    EXPECT_FALSE(Alive(training.rank1)) << "the failed attempt's rank 1 is still running";
    return out;
  }
};

TEST_F(ElasticJob, AKilledWorkerIsRestartedOnTheSameNodes) {
  Training training = StartElastic("worker", 8);
  ASSERT_TRUE(training.started());
  kill(training.rank1, SIGKILL);
  const std::string out = ExpectTrainedToTheEnd("worker", training, 2);
  EXPECT_TRUE(Contains(out, "failed: node 'b': rank 1 was killed by signal 9 (Killed); restart 1 of 3")) << out;
  // The training after the restart is the uninterrupted run's.
  const auto steady = Poplar({"launch", "cluster.yaml", "--plan", WritePlan(), "--run-dir", "steady", "--job-id",
                              "steady", "--steps", std::to_string(kSteps)});
  ASSERT_EQ(steady.exit_code, 0) << steady.out << steady.err;
  const auto a = nlohmann::json::parse(ReadLines(dir_.path() + "/steady/metrics/rank-0.jsonl").back());
  const auto b = nlohmann::json::parse(ReadLines(dir_.path() + "/worker/metrics/rank-0.jsonl").back());
  EXPECT_NEAR(b["loss"].get<double>(), a["loss"].get<double>(), 1e-6 * a["loss"].get<double>());
}

TEST_F(ElasticJob, AKilledAgentsNodeIsLeftOutAndTheJobGoesOnWithoutIt) {
  Training training = StartElastic("agent", 8);
  ASSERT_TRUE(training.started());
  agents_[1]->Signal(SIGKILL);  // its workers die with it
  const std::string out = ExpectTrainedToTheEnd("agent", training, 1);
  EXPECT_TRUE(ContainsAll(out, {"failed: node 'b': lost its agent", "left out: node 'b'"})) << out;
}

TEST_F(ElasticJob, LosingRankZerosNodeResumesFromTheSharedCheckpoints) {
  Training training = StartElastic("node", 8);
  ASSERT_TRUE(training.started());
  agents_[0]->Signal(SIGKILL);
  const std::string out = ExpectTrainedToTheEnd("node", training, 1);
  EXPECT_TRUE(Contains(out, "left out: node 'a'")) << out;
  EXPECT_TRUE(fs::exists(dir_.path() + "/shared/jobs/job-node/checkpoints/latest"));
}

TEST_F(ElasticJob, ASecondFailureIsASecondRestart) {
  Training training = StartElastic("twice", 8);
  ASSERT_TRUE(training.started());
  kill(training.rank1, SIGKILL);
  // The second attempt's rank 1, once it has trained on past a new checkpoint.
  const std::string metrics = dir_.path() + "/twice/metrics/rank-1.jsonl";
  int second = -1;
  for (int i = 0; i < 600 && second < 0; ++i) {
    const auto lines = ReadLines(metrics);
    const std::string log = ReadWholeFile(dir_.path() + "/twice/logs/rank-1.log");
    const auto at = log.rfind(": pid ");
    if (lines.size() >= 20 && at != std::string::npos && std::stoi(log.substr(at + 6)) != training.rank1) {
      second = std::stoi(log.substr(at + 6));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(second, 0) << ReadWholeFile(dir_.path() + "/twice.out");
  kill(second, SIGKILL);
  const std::string out = ExpectTrainedToTheEnd("twice", training, 2);
  EXPECT_TRUE(Contains(out, "restart 2 of 3")) << out;
  EXPECT_FALSE(Alive(second));
}

// An adaptive batch restarts at the batch it last trained (here one switched to by hand
// mid-run), not the cluster file's, when the restart plans anew for the nodes left.
TEST_F(ElasticJob, AnAdaptiveBatchGoesOnAtTheBatchItLastTrained) {
  std::string yaml = ReadTextFile(dir_.path() + "/cluster.yaml");
  const std::string every = "checkpoint_every: 5,";
  ASSERT_NE(yaml.find(every), std::string::npos);
  yaml.replace(yaml.find(every), every.size(),
               "checkpoint_every: 5, batch: adaptive, batch_min: 8, batch_max: 64, batch_every: 1000,");
  dir_.Write("adaptive.yaml", yaml);
  const auto planned = Poplar({"plan", "adaptive.yaml", "-o", "plan-adaptive.json"});  // ./profiles beside
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  Training training;
  training.launch = StartLaunch("adaptive", kSteps, "adaptive.yaml", WritePlan(), {"--elastic"});
  training.rank1 = WaitForSteps("adaptive", 1, 2);
  training.rank0 = WaitForSteps("adaptive", 0, 2);
  ASSERT_TRUE(training.started());
  const auto switched = Poplar({"switch", "adaptive.yaml", "--job-id", "job-adaptive", "--plan",
                                dir_.Write("batch-32.json", R"({"stage": 2, "global_batch": 32, "ranks": [
      {"rank": 0, "node": "a", "host": "127.0.0.1", "device_type": "emu-fast", "micro_batches": [20]},
      {"rank": 1, "node": "b", "host": "127.0.0.1", "device_type": "emu-slow", "micro_batches": [12]}]})")});
  ASSERT_EQ(switched.exit_code, 0) << switched.out << switched.err;
  // Killed once a checkpoint after the switch is due: trained at 32 from step `from`.
  const std::string metrics = dir_.path() + "/adaptive/metrics/rank-0.jsonl";
  int from = 0, last = 0;
  for (int i = 0; i < 1200 && (from == 0 || last < (from + 4) / 5 * 5 + 1); ++i) {
    for (const std::string& line : ReadLines(metrics)) {
      const auto record = nlohmann::json::parse(line);
      last = record["step"];
      if (from == 0 && record["global_batch"] == 32) from = last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(from, 0) << ReadWholeFile(dir_.path() + "/adaptive.out");
  ASSERT_LT(last, kSteps) << "the job ended before the kill";
  agents_[1]->Signal(SIGKILL);  // node b is lost: the job is planned again for node a
  const std::string out = ExpectTrainedToTheEnd("adaptive", training, 1);
  EXPECT_TRUE(
      ContainsAll(out, {"left out: node 'b'", "adaptive batch: the job goes on at batch 32, the last it trained",
                        "chosen for goodput every 1000 steps (from 32)"}))
      << out;
  EXPECT_EQ(nlohmann::json::parse(ReadTextFile(dir_.path() + "/adaptive/plan.json"))["global_batch"], 32);
  EXPECT_EQ(nlohmann::json::parse(ReadLines(metrics).back())["global_batch"], 32);
}

// A restart on the same nodes goes on with the plan the job last trained (here one
// switched to by hand mid-run, naming only rank 0's node), not the one it started with:
// a switch made for what the head saw of the devices (rebalancing, an adaptive batch)
// outlives the failure.
TEST_F(ElasticJob, ARestartOnTheSameNodesGoesOnWithThePlanItLastTrained) {
  // Long enough that the switch, a process of its own, lands well before the end.
  constexpr int kLonger = 3 * kSteps;
  Training training;
  training.launch = StartLaunch("replan", kLonger, "cluster.yaml", WritePlan(), {"--elastic", "--rebalance", "off"});
  training.rank1 = WaitForSteps("replan", 1, 2);
  training.rank0 = WaitForSteps("replan", 0, 2);
  ASSERT_TRUE(training.started());
  const auto switched = Poplar({"switch", "cluster.yaml", "--job-id", "job-replan", "--plan",
                                dir_.Write("split-18-6.json", R"({"stage": 2, "global_batch": 24, "ranks": [
      {"rank": 0, "node": "a", "micro_batches": [18]}, {"rank": 1, "micro_batches": [6]}]})")});
  ASSERT_EQ(switched.exit_code, 0) << switched.out << switched.err;
  // Killed once rank 1 has trained its new share: the starting plan gave it 8 samples.
  const std::string metrics = dir_.path() + "/replan/metrics/rank-1.jsonl";
  int last = 0;
  bool moved = false;
  for (int i = 0; i < 1200 && !moved; ++i) {
    for (const std::string& line : ReadLines(metrics)) {
      const auto record = nlohmann::json::parse(line);
      last = record["step"];
      moved = moved || record["samples"] == 6;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(moved) << ReadWholeFile(dir_.path() + "/replan.out");
  ASSERT_LT(last, kLonger) << "the job ended before the kill";
  kill(training.rank1, SIGKILL);
  const std::string out = ExpectTrainedToTheEnd("replan", training, 2, kLonger);
  EXPECT_TRUE(Contains(out, "elastic: the job goes on with plan 1, the last it trained (batch 24)")) << out;
  const auto plan = nlohmann::json::parse(ReadTextFile(dir_.path() + "/replan/plan.json"));
  EXPECT_EQ(plan["ranks"][1]["micro_batches"], nlohmann::json::array({6})) << plan.dump();
  // What the hand's plan left out, the restart takes from the plan before: rank 0's host
  // is the rendezvous.
  EXPECT_EQ(plan["ranks"][0]["host"], "127.0.0.1") << plan.dump();
  EXPECT_EQ(plan["ranks"][1]["node"], "b") << plan.dump();
  EXPECT_EQ(nlohmann::json::parse(ReadLines(metrics).back())["samples"], 6);
}

// A node left out that answers again is taken back once the next checkpoint is being
// written: the job stops there and goes on over every node, one step trained again.
TEST_F(ElasticJob, ANodeThatAnswersAgainIsTakenBackAfterACheckpoint) {
  // Long enough that the job still trains alone once node b's agent has started again
  // (its worker's --version, its credentials) and the head's next poll (every 3 s) found
  // it: 150 steps (some 6 s alone) were too few under the suite's load.
  constexpr int kLong = 300;
  Training training = StartElastic("back", 8, kLong);
  ASSERT_TRUE(training.started());
  agents_[1]->Signal(SIGKILL);
  agents_[1]->Wait(std::chrono::seconds(10));
  // Going on without node b: a record of one rank.
  const std::string metrics = dir_.path() + "/back/metrics/rank-0.jsonl";
  bool alone = false;
  for (int i = 0; i < 600 && !alone; ++i) {
    for (const std::string& line : ReadLines(metrics)) alone = alone || nlohmann::json::parse(line)["world_size"] == 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(alone) << ReadWholeFile(dir_.path() + "/back.out");
  std::string config = ReadTextFile(dir_.path() + "/b.yaml");
  config.replace(config.find("listen: 127.0.0.1:0"), 19, "listen: 127.0.0.1:" + std::to_string(ports_[1]));
  ChildOptions again;
  again.argv = {POPLAR_AGENT_BINARY, "--config", dir_.Write("b-again.yaml", config)};
  again.stderr_path = dir_.path() + "/b-again.log";
  agents_[1] = std::make_unique<ChildProcess>(again);
  const std::string out = ExpectTrainedToTheEnd("back", training, 2, kLong);
  EXPECT_TRUE(ContainsAll(out, {"left out: node 'b'",
                                "elastic: job job-back stopped: node 'b' answers again: taken "
                                "back after the checkpoint of step"}))
      << out;
  EXPECT_FALSE(Contains(out, "restart 2 of")) << out;  // taking back is no restart
}

// Without a shared_dir, the checkpoints go with rank 0's node: a restart without it
// refuses to start over from step 0, and the launch gives up after --max-restarts.
TEST_F(TwoAgents, AnElasticJobNeverSilentlyStartsOver) {
  Training training;
  training.launch = StartLaunch("lost", 30, "cluster.yaml", "", {"--elastic", "--max-restarts", "1"});
  training.rank1 = WaitForSteps("lost", 1, 8);
  training.rank0 = WaitForSteps("lost", 0, 8);
  ASSERT_TRUE(training.started());
  agents_[0]->Signal(SIGKILL);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(120)), 1);
  const std::string out = ReadWholeFile(dir_.path() + "/lost.out");
  const std::string err = ReadWholeFile(dir_.path() + "/lost.err");
  EXPECT_TRUE(ContainsAll(out, {"restart 1 of 1", "left out: node 'a'"})) << out;
  EXPECT_TRUE(
      ContainsAll(err, {"--resume-required", "would start over from step 0", "(after 1 restart, --max-restarts 1)"}))
      << err << out;
  // Nothing trained from step 0 again: rank 0's records of the second attempt are none.
  const auto lines = ReadLines(dir_.path() + "/lost/metrics/rank-0.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_GT(nlohmann::json::parse(lines.back())["step"].get<int>(), 1);
}

// A device runs one job or one profile at a time: a second job, or a measurement, on
// devices a job holds is refused, naming the job.
TEST_F(TwoAgents, DevicesInUseAreRefusedToOtherJobsAndToProfiling) {
  Training training = StartTraining("busy", 2);
  ASSERT_TRUE(training.started());
  const auto second = Poplar({"launch", "cluster.yaml", "--plan", WritePlan(), "--run-dir", "second", "--job-id",
                              "second", "--master-port", std::to_string(poplar::FindFreePort())});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_TRUE(
      ContainsAll(second.err, {"refused the launch", "busy: emu-", "(job 'job-busy')", "no worker was started"}))
      << second.err;
  EXPECT_FALSE(fs::exists(dir_.path() + "/second")) << "a launch every agent refused left a run directory";
  // The same job id again: refused as running, and the refused launch's stop (sent to
  // every node) must not stop the running job it collided with.
  const auto same_id =
      Poplar({"launch", "cluster.yaml", "--plan", WritePlan(), "--run-dir", "same-id", "--job-id", "job-busy"});
  EXPECT_EQ(same_id.exit_code, 1);
  EXPECT_TRUE(Contains(same_id.err, "job 'job-busy' is already running")) << same_id.err;
  const auto profile = Poplar({"profile", "cluster.yaml", "-o", "busy-profiles"});
  EXPECT_EQ(profile.exit_code, 1);
  EXPECT_TRUE(ContainsAll(profile.err, {"in use", "(job 'job-busy')"})) << profile.err;
  EXPECT_TRUE(Alive(training.rank0)) << "the running job was left alone";
  EXPECT_TRUE(Alive(training.rank1)) << "the running job was left alone";
  const auto status = Poplar({"status", "cluster.yaml"});
  EXPECT_TRUE(ContainsAll(status.out, {"job-busy (1 rank on emu-fast 0, step", "job-busy (1 rank on emu-slow 0, step"}))
      << status.out;
  const auto jobs = nlohmann::json::parse(Poplar({"status", "cluster.yaml", "--json"}).out)["nodes"][1]["jobs"];
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["job_id"], "job-busy");
  EXPECT_EQ(jobs[0]["ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(jobs[0]["devices"], nlohmann::json::array({"emu-slow 0"}));
  training.launch->Signal(SIGINT);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 130);
}

TEST_F(TwoAgents, ProfilingStopsEverywhereAtTheFirstRefusal) {
  // emu-slow trains a job of its own; emu-fast is free. Every type is profiled at once,
  // so b's refusal must cancel a's measurement: one error (the refusal, not the
  // cancellation it caused) and no profile written, not even emu-fast's.
  WriteCluster("only-b.yaml", "creds/token", "", 1, /*with_node_a=*/false);
  const std::string plan = dir_.Write("only-b-plan.json", R"({"stage": 2, "global_batch": 24, "policy": "poplar",
      "ranks": [{"rank": 0, "node": "b", "host": "127.0.0.1", "device": "cpu:0", "device_type": "emu-slow",
                 "micro_batches": [8, 8, 8]}], "predicted": {"step_s": 0.05, "samples_per_s": 480}})");
  const std::unique_ptr<ChildProcess> launch = StartLaunch("only-b", 100000, "only-b.yaml", plan);
  ASSERT_GT(WaitForSteps("only-b", 0, 1), 0);

  const auto profile = Poplar({"profile", "cluster.yaml", "-o", "profiles-now"});
  EXPECT_EQ(profile.exit_code, 1);
  EXPECT_TRUE(ContainsAll(profile.err, {"node 'b'", "in use", "(job 'job-only-b')"})) << profile.err;
  EXPECT_FALSE(Contains(profile.err, "cancelled")) << profile.err;
  EXPECT_FALSE(fs::exists(dir_.path() + "/profiles-now/emu-fast.json"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/profiles-now/emu-slow.json"));
  // Cancelled, not waited for: a's measurement (seconds long) never reached its cache,
  // whose entries are emu-fast-stageN-<key>.json (the measurement's own files, named
  // emu-fast-stagesN.<pid>-..., may still be being cleaned up).
  const fs::path cache = dir_.path() + "/a/cache/profiles";
  if (fs::exists(cache)) {
    for (const auto& entry : fs::directory_iterator(cache)) {
      const std::string name = entry.path().filename().string();
      EXPECT_FALSE(name.rfind("emu-fast-stage", 0) == 0 && name.find("-stages") == std::string::npos)
          << name << ": emu-fast was profiled to the end";
    }
  }
  launch->Signal(SIGINT);
  EXPECT_EQ(launch->Wait(std::chrono::seconds(60)), 130);
}

// Signals the head once both ranks train; the head must stop every worker, exit with
// 128 + the signal and name how it was stopped.
void TwoAgents::StopTheHeadWith(int signal_number, const std::string& how) {
  const std::string name = "signal" + std::to_string(signal_number);
  Training training = StartTraining(name, 2);
  ASSERT_TRUE(training.started());
  training.launch->Signal(signal_number);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 128 + signal_number);
  EXPECT_TRUE(Contains(ReadWholeFile(dir_.path() + "/" + name + ".err"), "stopped by the user (" + how));
  EXPECT_FALSE(Alive(training.rank0));
  EXPECT_FALSE(Alive(training.rank1));
}

TEST_F(TwoAgents, CtrlCStopsTheJobEverywhere) { StopTheHeadWith(SIGINT, "Ctrl-C"); }

// What a batch scheduler or `timeout` does to the head: the same orderly stop.
TEST_F(TwoAgents, SigtermToTheHeadStopsTheJobEverywhere) { StopTheHeadWith(SIGTERM, "SIGTERM"); }

// A closed terminal (an SSH session lost) stops the job in the same order, saying why.
TEST_F(TwoAgents, SighupToTheHeadStopsTheJobEverywhere) { StopTheHeadWith(SIGHUP, "SIGHUP: its terminal closed"); }

// Ctrl-C while the agents profile, before any rank runs: the head cancels the
// measurements and leaves as a refused launch does: no run directory half made and, on a
// resume, the earlier attempt's files where they were.
TEST_F(TwoAgents, CtrlCWhileTheAgentsProfileCancelsThemAndLeavesNoRunDirectory) {
  ChildOptions options;
  options.argv = {POPLAR_BINARY, "launch", "cluster.yaml", "--run-dir", "profiling", "--job-id", "profiling"};
  options.cwd = dir_.path();
  options.stderr_path = dir_.path() + "/profiling.err";
  ChildProcess launch(options);
  bool measuring = false;
  for (int i = 0; i < 600 && !measuring; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    measuring = Contains(ReadWholeFile(dir_.path() + "/profiling.err"), "measuring on emu-slow");
  }
  ASSERT_TRUE(measuring) << ReadWholeFile(dir_.path() + "/profiling.err");
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(std::chrono::seconds(60)), 130);
  const std::string err = ReadWholeFile(dir_.path() + "/profiling.err");
  EXPECT_TRUE(Contains(err, "stopped by the user (Ctrl-C) while the agents profiled")) << err;
  EXPECT_FALSE(fs::exists(dir_.path() + "/profiling")) << "the run directory was left";
  // Node b's agent was measuring; it stops once the head's stream is gone.
  bool stopped = false;
  for (int i = 0; i < 300 && !stopped; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stopped = Contains(ReadWholeFile(dir_.path() + "/b.log"), "profiling cancelled by the caller");
  }
  EXPECT_TRUE(stopped) << ReadWholeFile(dir_.path() + "/b.log");
}

// Output that can no longer be written (`| tee` or `| head` gone) does not end the job:
// SIGPIPE does not kill the head, nor with it the training on every node.
TEST_F(TwoAgents, AHeadWhoseOutputReaderIsGoneTrainsOn) {
  const std::string plan = WritePlan();
  ChildOptions options;
  options.argv = {"/bin/bash", "-c",
                  "set -o pipefail; '" POPLAR_BINARY
                  "' launch cluster.yaml --plan plan.json --run-dir piped "
                  "--job-id job-piped --steps 6 --progress-every 1 --timeout 20 | head -c 0"};
  options.cwd = dir_.path();
  options.stderr_path = dir_.path() + "/piped.err";
  ChildProcess launch(options);
  EXPECT_EQ(launch.Wait(std::chrono::seconds(120)), 0) << ReadWholeFile(dir_.path() + "/piped.err");
  const std::string summary = ReadWholeFile(dir_.path() + "/piped/summary.json");
  EXPECT_TRUE(Contains(summary, "\"ok\": true")) << summary;
  EXPECT_TRUE(Contains(summary, "\"steps\": 6")) << summary;
}

// A node that stops answering without closing its connections (frozen, or cut off by
// the network) is noticed by keepalive: the job stops with an error naming the node.
TEST_F(TwoAgents, AFrozenAgentIsNoticedAndTheJobStops) {
  Training training = StartTraining("frozen", 2);
  ASSERT_TRUE(training.started());
  agents_[1]->Signal(SIGSTOP);  // its worker trains on; only the agent is silent
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 1);
  const std::string err = ReadWholeFile(dir_.path() + "/frozen.err");
  EXPECT_TRUE(Contains(err, "node 'b'")) << err;
  EXPECT_FALSE(Alive(training.rank0));
  agents_[1]->Signal(SIGCONT);
}

// The other way round: a head that goes silent is noticed by the agents, which stop
// their workers rather than train for nobody. Woken again, the head says that it was
// the one stalled, not that a node lost its agent.
TEST_F(TwoAgents, AFrozenHeadIsNoticedAndTheAgentsStopTheJob) {
  Training training = StartTraining("headless", 2);
  ASSERT_TRUE(training.started());
  training.launch->Signal(SIGSTOP);
  for (int i = 0; i < 600 && (Alive(training.rank0) || Alive(training.rank1)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(Alive(training.rank0)) << "a worker trained on for a silent head";
  EXPECT_FALSE(Alive(training.rank1)) << "a worker trained on for a silent head";
  training.launch->Signal(SIGCONT);
  EXPECT_EQ(training.launch->Wait(std::chrono::seconds(60)), 1);
  const std::string err = ReadWholeFile(dir_.path() + "/headless.err");
  EXPECT_TRUE(ContainsAll(err, {"job job-headless failed: the head (this poplar launch) was stalled for",
                                "suspended with Ctrl-Z or SIGSTOP", "--resume"}))
      << err;
  EXPECT_FALSE(Contains(err, "lost its agent")) << err;
}

TEST_F(TwoAgents, APlanWithoutRankZerosHostIsRefusedByTheHead) {
  std::string text = ReadWholeFile(WritePlan());
  text.replace(text.find("\"host\": \"127.0.0.1\", "), 21, "");  // rank 0's host
  const std::string plan = dir_.Write("no-host.json", text);
  const auto run = Poplar({"launch", "cluster.yaml", "--plan", plan, "--run-dir", "nohost"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(ContainsAll(run.err, {plan, "ranks[0].host", "is required"})) << run.err;
  EXPECT_FALSE(fs::exists(dir_.path() + "/nohost")) << "a refused launch leaves no run directory";

  text = ReadWholeFile(WritePlan());
  const std::string node_b = "\"node\": \"b\", ";
  text.replace(text.find(node_b), node_b.size(), "");  // rank 1's node
  const auto no_node = Poplar({"launch", "cluster.yaml", "--plan", dir_.Write("no-node.json", text)});
  EXPECT_EQ(no_node.exit_code, 1);
  EXPECT_TRUE(ContainsAll(no_node.err, {"ranks[1].node", "is required"})) << no_node.err;
  // The head names a missing device type in the user's file, before "launching job",
  // not the agent in terms of its request's plan_json.
  text = ReadWholeFile(WritePlan());
  const std::string slow = "\"device_type\": \"emu-slow\", ";
  text.replace(text.find(slow), slow.size(), "");
  const auto no_type = Poplar({"launch", "cluster.yaml", "--plan", dir_.Write("no-type.json", text)});
  EXPECT_EQ(no_type.exit_code, 1);
  EXPECT_TRUE(ContainsAll(no_type.err, {"no-type.json: ranks[1].device_type", "is required"})) << no_type.err;
  EXPECT_FALSE(Contains(no_type.out, "launching job")) << no_type.out;
  EXPECT_FALSE(fs::exists(dir_.path() + "/runs")) << "a refused launch leaves no run directory";
}

TEST_F(TwoAgents, UnreachableAgentsAndMissingDevicesAreNamed) {
  WriteCluster("three.yaml", "creds/token",
               "  - {name: c, host: 127.0.0.1, agent: \"127.0.0.1:" + std::to_string(poplar::FindFreePort()) +
                   "\", devices: [{type: emu-fast, count: 1}]}\n");
  const auto down = Poplar({"launch", "three.yaml"});  // plans through the agents: asks them all first
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_TRUE(ContainsAll(down.err, {"node 'c': agent unreachable at 127.0.0.1:"})) << down.err;
  const auto status = Poplar({"status", "three.yaml"});
  EXPECT_EQ(status.exit_code, 1);
  EXPECT_TRUE(ContainsAll(status.out, {"DOWN", "up", "\nnode 'c': agent unreachable at 127.0.0.1:"})) << status.out;
  // The reason is under the table, not in it: its rows stay short.
  const std::string rows = status.out.substr(0, status.out.find("\nnode 'c'"));
  EXPECT_FALSE(Contains(rows, "unreachable")) << status.out;
  EXPECT_TRUE(ContainsAll(status.err, {"1 of 3 agents did not answer"})) << status.err;
  const auto status_json = Poplar({"status", "three.yaml", "--json"});
  EXPECT_EQ(status_json.exit_code, 1);
  const auto nodes = nlohmann::json::parse(status_json.out)["nodes"];
  ASSERT_EQ(nodes.size(), 3u) << status_json.out;
  EXPECT_EQ(nodes[2]["state"], "down");
  EXPECT_TRUE(Contains(nodes[2]["reason"], "agent unreachable at 127.0.0.1:")) << nodes[2].dump();
  EXPECT_TRUE(Contains(status_json.err, "1 of 3 agents did not answer (why: each node's reason)")) << status_json.err;

  // A plan made for another cluster is refused before any agent starts a rank, which
  // would fail later or wait for its peers.
  std::string other_batch = ReadTextFile(WritePlan());
  other_batch = ReplaceOnce(other_batch, "\"global_batch\": 24", "\"global_batch\": 20");
  other_batch = ReplaceOnce(other_batch, "\"micro_batches\": [16]", "\"micro_batches\": [12]");
  const auto foreign =
      Poplar({"launch", "cluster.yaml", "--plan", dir_.Write("other-batch.json", other_batch), "--job-id", "foreign"});
  EXPECT_EQ(foreign.exit_code, 1);
  EXPECT_TRUE(ContainsAll(foreign.err, {"other-batch.json: global_batch", "is 20 but cluster.yaml trains with 24"}))
      << foreign.err;
  std::string swapped = ReadTextFile(WritePlan());
  swapped = ReplaceOnce(swapped, "\"node\": \"a\"", "\"node\": \"x\"");
  swapped = ReplaceOnce(swapped, "\"node\": \"b\"", "\"node\": \"a\"");
  swapped = ReplaceOnce(swapped, "\"node\": \"x\"", "\"node\": \"b\"");
  const auto moved =
      Poplar({"launch", "cluster.yaml", "--plan", dir_.Write("swapped.json", swapped), "--job-id", "moved"});
  EXPECT_EQ(moved.exit_code, 1);
  EXPECT_TRUE(ContainsAll(moved.err, {"swapped.json: ranks[0].node", "is 'b' but rank 0", "is on node 'a'"}))
      << moved.err;
  EXPECT_FALSE(fs::exists(dir_.path() + "/a/work/jobs/foreign"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/b/work/jobs/moved"));

  WriteCluster("two-fast.yaml", "creds/token", "", 2);
  const auto missing = Poplar({"launch", "two-fast.yaml"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(Contains(missing.err, "node 'a': the cluster file lists 2 x emu-fast but its agent has 1"))
      << missing.err;
}

// A raw client, to present exactly the credentials a test wants.
std::unique_ptr<v1::Agent::Stub> Stub(int port, const std::string& ca, const std::string& key, const std::string& cert,
                                      const std::string& token) {
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = ReadTextFile(ca);
  if (!key.empty()) {
    tls.pem_private_key = ReadTextFile(key);
    tls.pem_cert_chain = ReadTextFile(cert);
  }
  auto credentials = grpc::SslCredentials(tls);
  if (!token.empty()) {
    credentials = grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token));
  }
  return v1::Agent::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), credentials));
}

grpc::Status Describe(v1::Agent::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::DescribeResponse response;
  return stub.Describe(&context, {}, &response);
}

TEST_F(TwoAgents, CallersWithoutTheTokenOrTheCertificateAreRefused) {
  const std::string c = dir_.path() + "/creds/";
  const std::string token = ReadToken(c + "token");
  EXPECT_TRUE(Describe(*Stub(ports_[0], c + "ca.pem", c + "head.key", c + "head.pem", token)).ok());

  const auto no_token = Describe(*Stub(ports_[0], c + "ca.pem", c + "head.key", c + "head.pem", ""));
  EXPECT_EQ(no_token.error_code(), grpc::StatusCode::UNAUTHENTICATED) << no_token.error_message();
  const auto wrong_token = Describe(*Stub(ports_[0], c + "ca.pem", c + "head.key", c + "head.pem", token + "x"));
  EXPECT_EQ(wrong_token.error_code(), grpc::StatusCode::UNAUTHENTICATED) << wrong_token.error_message();
  EXPECT_FALSE(Describe(*Stub(ports_[0], c + "ca.pem", "", "", token)).ok()) << "served a caller without a certificate";

  const auto other =
      RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", dir_.path() + "/other"}), dir_.path());
  ASSERT_EQ(other.exit_code, 0);
  const std::string o = dir_.path() + "/other/";
  EXPECT_FALSE(Describe(*Stub(ports_[0], c + "ca.pem", o + "head.key", o + "head.pem", token)).ok())
      << "served a certificate from another CA";

  dir_.Write("wrong-token", "0123456789abcdef0123456789abcdef\n");
  WriteCluster("wrong.yaml", "wrong-token", "");
  const auto refused = Poplar({"status", "wrong.yaml"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(ContainsAll(refused.out, {"refused our credentials", "cluster token is wrong"})) << refused.out;

  // A head key that is not its certificate's is named as such, not as "agent
  // unreachable ... empty address list".
  std::string yaml = ReadTextFile(WriteCluster("cluster.yaml", "creds/token", ""));
  yaml.replace(yaml.find("creds/head.key"), 14, "creds/nodes/a.key");
  const auto wrong_key = Poplar({"status", dir_.Write("wrong-key.yaml", yaml)});
  EXPECT_EQ(wrong_key.exit_code, 1);
  EXPECT_TRUE(ContainsAll(
      wrong_key.err, {"wrong-key.yaml: credentials", "is the key the certificate's", "gRPC: Invalid private key;"}))
      << wrong_key.err;
  EXPECT_TRUE(poplar::testing::IsOneLine(wrong_key.err)) << wrong_key.err;
  EXPECT_FALSE(Contains(wrong_key.out + wrong_key.err, "unreachable")) << wrong_key.out;

  // A head whose credentials come from another CA: the agents' certificate fails its
  // check. Said in poplar's one line, quoting gRPC, with no raw gRPC log lines.
  std::string other_yaml = ReadTextFile(WriteCluster("cluster.yaml", "creds/token", ""));
  for (const char* file : {"ca.pem", "head.pem", "head.key"}) {
    const std::string from = std::string("creds/") + file;
    other_yaml.replace(other_yaml.find(from), from.size(), std::string("other/") + file);
  }
  const auto other_ca = Poplar({"launch", dir_.Write("other-ca.yaml", other_yaml), "--plan", WritePlan()});
  EXPECT_EQ(other_ca.exit_code, 1);
  EXPECT_TRUE(poplar::testing::IsOneLine(other_ca.err)) << other_ca.err;
  EXPECT_TRUE(ContainsAll(other_ca.err, {"node 'a': the TLS handshake with the agent at 127.0.0.1:", "one CA",
                                         "certificate verify failed"}))
      << other_ca.err;
  const auto other_status = Poplar({"status", "other-ca.yaml"});
  EXPECT_EQ(other_status.exit_code, 1);
  EXPECT_TRUE(poplar::testing::IsOneLine(other_status.err)) << other_status.err;
  EXPECT_TRUE(ContainsAll(other_status.out, {"DOWN", "the TLS handshake"})) << other_status.out;
  // The cluster's CA, but a head certificate from another: the head refuses its own
  // files before any call.
  std::string foreign_yaml = ReadTextFile(WriteCluster("cluster.yaml", "creds/token", ""));
  for (const char* file : {"head.pem", "head.key"}) {
    const std::string from = std::string("creds/") + file;
    foreign_yaml.replace(foreign_yaml.find(from), from.size(), std::string("other/") + file);
  }
  const auto own_check = Poplar({"status", dir_.Write("foreign-head.yaml", foreign_yaml)});
  EXPECT_EQ(own_check.exit_code, 1);
  EXPECT_TRUE(ContainsAll(own_check.err, {"foreign-head.yaml: credentials.cert", "other/head.pem",
                                          "is not signed by the cluster's CA in credentials.ca"}))
      << own_check.err;
  // A head that trusts both CAs passes its own check, and the agent, which trusts only
  // the cluster's, refuses its certificate (under TLS 1.3 by closing the connection),
  // which the head does not call "agent unreachable".
  dir_.Write("both-cas.pem", ReadTextFile(c + "ca.pem") + ReadTextFile(o + "ca.pem"));
  foreign_yaml.replace(foreign_yaml.find("creds/ca.pem"), 12, "both-cas.pem");
  const auto foreign = Poplar({"status", dir_.Write("foreign-head.yaml", foreign_yaml)});
  EXPECT_EQ(foreign.exit_code, 1);
  EXPECT_TRUE(ContainsAll(foreign.out,
                          {"DOWN", "closed the connection during the TLS handshake", "refused the head's certificate"}))
      << foreign.out << foreign.err;
  EXPECT_FALSE(Contains(foreign.out, "unreachable")) << foreign.out;
}

// One node's refusal starts no rank anywhere: the head has every agent check its part
// first (CheckLaunch). Node b lacks the data: node a starts no rank, and no failed run
// is left behind.
TEST_F(TwoAgents, OneNodesRefusalStartsNoWorkerOnAnyNode) {
  fs::rename(dir_.path() + "/b/work/tokens.bin", dir_.path() + "/tokens.bin.away");
  const auto refused = Poplar(
      {"launch", "cluster.yaml", "--plan", WritePlan(), "--run-dir", "refused", "--job-id", "refused", "--steps", "2"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(ContainsAll(refused.err, {"job refused was not started: node 'b'", "refused the launch", "settings.data",
                                        "no worker was started on any node"}))
      << refused.err;
  EXPECT_FALSE(Contains(refused.err, "node 'a'")) << refused.err;
  EXPECT_FALSE(Contains(refused.out, "started on node")) << refused.out;
  EXPECT_FALSE(fs::exists(dir_.path() + "/a/work/jobs/refused")) << "node a wrote the job's folder";
  EXPECT_FALSE(fs::exists(dir_.path() + "/refused")) << "a refused launch left a run directory";

  // With the data back, the same job id launches: the refusal left nothing in the way.
  fs::rename(dir_.path() + "/tokens.bin.away", dir_.path() + "/b/work/tokens.bin");
  const auto launched = Poplar(
      {"launch", "cluster.yaml", "--plan", WritePlan(), "--run-dir", "refused", "--job-id", "refused", "--steps", "2"});
  ASSERT_EQ(launched.exit_code, 0) << launched.out << launched.err;
  EXPECT_TRUE(Contains(launched.out, "trained 2 steps")) << launched.out;
}

TEST_F(TwoAgents, RequestsNamingPathsOutsideTheWorkDirectoryAreRefused) {
  const std::string c = dir_.path() + "/creds/";
  auto stub = Stub(ports_[0], c + "ca.pem", c + "head.key", c + "head.pem", ReadToken(c + "token"));
  // A launch of node a's rank of WritePlan(), one step.
  auto request_for = [&](const std::string& job_id, const std::string& data) {
    v1::LaunchRequest request;
    request.set_job_id(job_id);
    request.set_node("a");
    request.set_plan_json(ReadTextFile(WritePlan()));
    request.set_model_config_json(ReadTextFile(POPLAR_SOURCE_DIR "/configs/models/gpt-tiny.json"));
    request.set_master_addr("127.0.0.1");
    request.set_master_port(poplar::FindFreePort());
    (*request.mutable_settings())["data"] = data;
    (*request.mutable_settings())["steps"] = "1";
    return request;
  };
  auto launch = [&](const std::string& job_id, const std::string& data) {
    const v1::LaunchRequest request = request_for(job_id, data);
    grpc::ClientContext context;
    auto reader = stub->Launch(&context, request);
    v1::LaunchEvent event;
    int events = 0;
    while (reader->Read(&event)) ++events;
    EXPECT_EQ(events, 0);
    return reader->Finish();
  };
  fs::create_directory_symlink("/etc", dir_.path() + "/a/work/etc-link");
  for (const std::string data : {"../../creds/token", "/etc/passwd", "etc-link/passwd"}) {
    const auto status = launch("escape", data);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << data;
    EXPECT_TRUE(Contains(status.error_message(), "settings.data")) << status.error_message();
  }
  const auto bad_id = launch("../../outside", "tokens.bin");
  EXPECT_EQ(bad_id.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(bad_id.error_message(), "job_id"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/outside"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/a/work/jobs/escape"));

  // CheckLaunch makes the same checks, and writes and starts nothing either way.
  auto check = [&](const std::string& data, v1::CheckLaunchResponse* response) {
    grpc::ClientContext context;
    return stub->CheckLaunch(&context, request_for("checked", data), response);
  };
  v1::CheckLaunchResponse response;
  const auto escaping = check("/etc/passwd", &response);
  EXPECT_EQ(escaping.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(escaping.error_message(), "settings.data")) << escaping.error_message();
  const auto fine = check("tokens.bin", &response);
  ASSERT_TRUE(fine.ok()) << fine.error_message();
  ASSERT_EQ(response.devices_size(), 1);
  EXPECT_EQ(response.devices(0), "emu-fast 0");
  EXPECT_FALSE(fs::exists(dir_.path() + "/a/work/jobs/checked")) << "a check wrote the job's folder";
}

// One node's agent with GPUs played by tests/agent/fake_nvml.cc (nvml_library), in a
// folder of its own with the cluster's credentials and a token file in its work_dir.
// `env` sets the fake (FAKE_NVML_GPUS, FAKE_NVML_INIT_DELAY_MS); port() is 0 if the
// agent did not start.
class FakeGpuAgent {
 public:
  FakeGpuAgent(const std::string& name, std::map<std::string, std::string> env) : dir_(name) {
    const std::string& root = dir_.path();
    EXPECT_EQ(RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", root + "/creds", "--node",
                                  "gpu=127.0.0.1"}),
                         root)
                  .exit_code,
              0);
    fs::create_directories(root + "/work");
    dir_.Write("work/tokens.bin", std::string(4000, 'a'));
    const std::string config =
        dir_.Write("agent.yaml",
                   "listen: 127.0.0.1:0\n"
                   "credentials: {ca: creds/ca.pem, cert: creds/nodes/gpu.pem, key: creds/nodes/gpu.key, token: "
                   "creds/token}\n"
                   "work_dir: work\nworker: " POPLAR_WORKER_BINARY
                   "\ngpus: auto\n"
                   "nvml_library: " FAKE_NVML_LIBRARY "\n");
    ChildOptions options;
    options.argv = {POPLAR_AGENT_BINARY, "--config", config, "--port-file", root + "/agent.port"};
    options.env = std::move(env);
    options.stderr_path = root + "/agent.log";
    agent_ = std::make_unique<ChildProcess>(options);
    for (int i = 0; i < 400 && port_ == 0; ++i) {
      if (fs::exists(root + "/agent.port")) port_ = std::stoi(ReadTextFile(root + "/agent.port"));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ScratchDir& dir() { return dir_; }
  const std::string& root() const { return dir_.path(); }
  int port() const { return port_; }
  std::string log() const { return ReadWholeFile(dir_.path() + "/agent.log"); }

 private:
  ScratchDir dir_;
  std::unique_ptr<ChildProcess> agent_;
  int port_ = 0;
};

// A GPU node, with NVML played by tests/agent/fake_nvml.cc: the agent finds the GPUs
// (nvml_library), the head sees them, and a GPU that a process outside poplar uses is
// refused to a launch, naming the process.
TEST(GpuNode, TheAgentOffersItsGpusAndRefusesOnesInUseOutsidePoplar) {
  FakeGpuAgent node("gpu-node",
                    {{"FAKE_NVML_GPUS", "NVIDIA H200|150754820096|9.0|4242;NVIDIA H200|150754820096|9.0|4243,4244"}});
  ScratchDir& dir = node.dir();
  const std::string& root = node.root();
  const int port = node.port();
  ASSERT_NE(port, 0) << node.log();
  EXPECT_TRUE(Contains(ReadWholeFile(root + "/agent.log"), "devices: NVIDIA-H200, NVIDIA-H200;"))
      << ReadWholeFile(root + "/agent.log");

  dir.Write("cluster.yaml",
            "name: gpu\ntraining: {global_batch: 4, precision: mixed, stage: 0}\n"
            "network: {intra_node: {bandwidth_gbps: 2400, latency_us: 5}}\n"
            "credentials: {ca: creds/ca.pem, cert: creds/head.pem, key: creds/head.key, token: creds/token}\n"
            "job: {model: " POPLAR_SOURCE_DIR
            "/configs/models/gpt-tiny.json, data: tokens.bin, steps: 2}\n"
            "nodes:\n  - {name: g, host: 127.0.0.1, agent: \"127.0.0.1:" +
                std::to_string(port) + "\", devices: [{type: NVIDIA-H200, count: 2}]}\n");
  auto poplar = [&](std::vector<std::string> args) {
    args.insert(args.begin(), POPLAR_BINARY);
    ChildOptions run = Command(args);
    run.cwd = root;
    return RunProcess(run, root, std::chrono::seconds(120));
  };
  // Status needs no network section, though the node has two devices.
  std::string no_network = ReadTextFile(root + "/cluster.yaml");
  no_network.erase(no_network.find("network:"),
                   no_network.find('\n', no_network.find("network:")) - no_network.find("network:") + 1);
  dir.Write("no-network.yaml", no_network);
  const auto status = poplar({"status", "no-network.yaml"});
  EXPECT_EQ(status.exit_code, 0) << status.out << status.err;
  EXPECT_TRUE(Contains(status.out, "2 x NVIDIA-H200")) << status.out;

  dir.Write("plan.json", R"({"stage": 0, "global_batch": 4, "ranks": [
      {"rank": 0, "node": "g", "host": "127.0.0.1", "device_type": "NVIDIA-H200", "micro_batches": [2]},
      {"rank": 1, "node": "g", "host": "127.0.0.1", "device_type": "NVIDIA-H200", "micro_batches": [2]}]})");
  const auto launch = poplar({"launch", "cluster.yaml", "--plan", "plan.json", "--job-id", "busy"});
  EXPECT_EQ(launch.exit_code, 1);
  EXPECT_TRUE(ContainsAll(launch.err, {"node 'g'", "NVIDIA-H200 0 (process 4242, not started by this agent)",
                                       "NVIDIA-H200 1 (processes 4243, 4244, not started by this agent)"}))
      << launch.err;
  EXPECT_FALSE(fs::exists(root + "/work/jobs/busy")) << "a refused launch starts nothing";
}

// A certificate that has expired, or is not the cluster CA's, is named by the side that
// holds it when it starts, not as failed handshakes at the other end; one that expires
// within 30 days is warned of.
TEST(Credentials, ExpiredCertificatesAreRefusedAtStartAndSoonExpiringOnesWarnedOf) {
  ScratchDir dir("certificates");
  const std::string& root = dir.path();
  ASSERT_EQ(RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", root + "/creds", "--node",
                                "a=127.0.0.1"}),
                       root)
                .exit_code,
            0);
  // Certificates for the agent's key, signed by the cluster's CA, valid for `days`
  // (-1: it expired yesterday).
  auto sign = [&](const std::string& name, const std::string& days) {
    const std::string c = root + "/creds/";
    const auto request = RunProcess(Command({"/usr/bin/openssl", "req", "-new", "-key", c + "nodes/a.key", "-subj",
                                             "/CN=poplar-agent", "-out", root + "/" + name + ".csr"}),
                                    root);
    ASSERT_EQ(request.exit_code, 0) << request.err;
    const std::vector<std::string> x509 = {
        "/usr/bin/openssl", "x509",   "-req",       "-in",  root + "/" + name + ".csr",      "-CA",
        c + "ca.pem",       "-CAkey", c + "ca.key", "-out", root + "/creds/" + name + ".pem"};
    auto with = [&x509](std::vector<std::string> validity) {
      validity.insert(validity.begin(), x509.begin(), x509.end());
      return validity;
    };
    auto signed_ = RunProcess(Command(with({"-days", days})), root);
    if (signed_.exit_code != 0 && days.front() == '-') {
      // OpenSSL 3.4 and later refuse a negative -days ("end date before start date") and
      // take the dates themselves instead (3.0 has no -not_before).
      const auto utc = [](std::chrono::hours from_now) {
        const std::time_t when = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + from_now);
        char text[32];
        std::strftime(text, sizeof(text), "%Y%m%d%H%M%SZ", std::gmtime(&when));
        return std::string(text);
      };
      signed_ = RunProcess(Command(with({"-not_before", utc(std::chrono::hours(-48)), "-not_after",
                                         utc(std::chrono::hours(24 * std::stoi(days)))})),
                           root);
    }
    ASSERT_EQ(signed_.exit_code, 0) << signed_.err;
  };
  sign("expired", "-1");
  sign("soon", "5");
  fs::create_directories(root + "/work");
  auto agent_file = [&](const std::string& cert) {
    return dir.Write("agent.yaml",
                     "listen: 127.0.0.1:0\ncredentials: {ca: creds/ca.pem, cert: creds/" + cert +
                         ", key: creds/nodes/a.key, token: creds/token}\nwork_dir: work\nworker: " POPLAR_WORKER_BINARY
                         "\ngpus: none\nemulated:\n  - {type: emu, threads: 1, "
                         "memory_mib: 16}\n");
  };
  const auto expired =
      RunProcess(Command({POPLAR_AGENT_BINARY, "--config", agent_file("expired.pem")}), root, std::chrono::seconds(60));
  EXPECT_EQ(expired.exit_code, 1);
  EXPECT_TRUE(ContainsAll(
      expired.err, {"agent.yaml: credentials.cert", "expired.pem expired on", "scripts/make-cluster-credentials"}))
      << expired.err;
  EXPECT_TRUE(poplar::testing::IsOneLine(expired.err)) << expired.err;

  // The head warns and goes on (the agent it asks is not there: status says DOWN).
  const std::string cluster =
      dir.Write("cluster.yaml",
                "name: c\ntraining: {global_batch: 8, precision: fp32}\n"
                "network:\n  inter_node: {bandwidth_gbps: 20, latency_us: 30}\n"
                "credentials: {ca: creds/ca.pem, cert: creds/soon.pem, key: creds/nodes/a.key, token: creds/token}\n"
                "nodes:\n  - {name: a, host: 127.0.0.1, agent: \"127.0.0.1:" +
                    std::to_string(poplar::FindFreePort()) + "\", devices: [{type: emu, count: 1}]}\n");
  const auto soon = RunProcess(Command({POPLAR_BINARY, "status", cluster}), root, std::chrono::seconds(60));
  EXPECT_TRUE(ContainsAll(soon.err, {"poplar: warning: ", "cluster.yaml: credentials.cert", "soon.pem expires on",
                                     " days; make new credentials"}))
      << soon.err;
  EXPECT_TRUE(Contains(soon.out, "DOWN")) << soon.out;

  // The head's certificate on an agent: its extended key usage is clientAuth, which the
  // head would refuse in the handshake.
  const auto head_cert =
      RunProcess(Command({POPLAR_AGENT_BINARY, "--config", agent_file("head.pem")}), root, std::chrono::seconds(60));
  EXPECT_EQ(head_cert.exit_code, 1);
  EXPECT_TRUE(
      ContainsAll(head_cert.err, {"credentials.cert", "head.pem is not meant for an agent (it lacks serverAuth"}))
      << head_cert.err;

  // A CA that expires within 30 days is warned of too, naming the CA.
  const auto short_ca = RunProcess(Command({"/usr/bin/openssl",
                                            "req",
                                            "-x509",
                                            "-newkey",
                                            "ec",
                                            "-pkeyopt",
                                            "ec_paramgen_curve:P-256",
                                            "-nodes",
                                            "-keyout",
                                            root + "/creds/short-ca.key",
                                            "-out",
                                            root + "/creds/short-ca.pem",
                                            "-days",
                                            "5",
                                            "-subj",
                                            "/CN=short CA",
                                            "-addext",
                                            "basicConstraints=critical,CA:TRUE",
                                            "-addext",
                                            "keyUsage=critical,keyCertSign"}),
                                   root);
  ASSERT_EQ(short_ca.exit_code, 0) << short_ca.err;
  const auto leaf = RunProcess(
      Command({"/usr/bin/openssl", "x509", "-req", "-in", root + "/soon.csr", "-CA", root + "/creds/short-ca.pem",
               "-CAkey", root + "/creds/short-ca.key", "-days", "100", "-out", root + "/creds/under-short-ca.pem"}),
      root);
  ASSERT_EQ(leaf.exit_code, 0) << leaf.err;
  std::string under_short = ReadTextFile(cluster);
  under_short.replace(under_short.find("ca: creds/ca.pem"), 16, "ca: creds/short-ca.pem");
  under_short.replace(under_short.find("creds/soon.pem"), 14, "creds/under-short-ca.pem");
  const auto ca_soon = RunProcess(Command({POPLAR_BINARY, "status", dir.Write("short-ca.yaml", under_short)}), root,
                                  std::chrono::seconds(60));
  EXPECT_TRUE(ContainsAll(ca_soon.err, {"poplar: warning: ", "credentials.ca",
                                        "short-ca.pem: the CA certificate that "
                                        "signs",
                                        "expires on"}))
      << ca_soon.err;
}

// Ctrl-C after the plan, while the head asks the agents (here one whose NVML takes 3 s
// for every device listing), ends the launch before any worker starts and leaves a
// resumed run directory as it was: the earlier attempt's plan and summary are not moved
// into attempts/1, nor the new plan put in their place.
TEST(SlowNode, CtrlCBeforeAnyWorkerStartsLeavesTheRunDirectoryAsItWas) {
  FakeGpuAgent node("slow-node",
                    {{"FAKE_NVML_GPUS", "NVIDIA H200|150754820096|9.0|"}, {"FAKE_NVML_INIT_DELAY_MS", "3000"}});
  ScratchDir& dir = node.dir();
  const std::string& root = node.root();
  const int port = node.port();
  ASSERT_NE(port, 0) << node.log();
  dir.Write("cluster.yaml",
            "name: slow\ntraining: {global_batch: 4, precision: mixed, stage: 0}\n"
            "credentials: {ca: creds/ca.pem, cert: creds/head.pem, key: creds/head.key, token: creds/token}\n"
            "job: {model: " POPLAR_SOURCE_DIR
            "/configs/models/gpt-tiny.json, data: tokens.bin, steps: 2}\n"
            "nodes:\n  - {name: g, host: 127.0.0.1, agent: \"127.0.0.1:" +
                std::to_string(port) + "\", devices: [{type: NVIDIA-H200, count: 1}]}\n");
  dir.Write("plan.json", R"({"stage": 0, "global_batch": 4, "ranks": [{"rank": 0, "node": "g", "host": "127.0.0.1",
      "device": "cuda:0", "device_type": "NVIDIA-H200", "micro_batches": [4]}]})");
  // The earlier attempt of job `again`.
  dir.Write("run/job_id", "again\n");
  dir.Write("run/plan.json", "the earlier plan\n");
  dir.Write("run/summary.json", "{\"job_id\": \"again\", \"ok\": false}\n");

  ChildOptions launch_options;
  launch_options.argv = {POPLAR_BINARY, "launch", "cluster.yaml", "--plan", "plan.json",
                         "--run-dir",   "run",    "--job-id",     "again",  "--resume"};
  launch_options.cwd = root;
  launch_options.stdout_path = root + "/launch.out";
  launch_options.stderr_path = root + "/launch.err";
  ChildProcess launch(launch_options);
  bool following = false;
  for (int i = 0; i < 500 && !following; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    following = Contains(ReadWholeFile(root + "/launch.out"), "following plan.json");
  }
  ASSERT_TRUE(following) << ReadWholeFile(root + "/launch.err");
  // Describe takes 3 s, then the check of the launch 3 s more: this lands in the check.
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(std::chrono::seconds(60)), 130);
  const std::string err = ReadWholeFile(root + "/launch.err");
  EXPECT_TRUE(Contains(err, "job again was not started: stopped by the user (Ctrl-C); no worker was started")) << err;
  EXPECT_EQ(ReadTextFile(root + "/run/plan.json"), "the earlier plan\n");
  EXPECT_EQ(ReadTextFile(root + "/run/summary.json"), "{\"job_id\": \"again\", \"ok\": false}\n");
  EXPECT_FALSE(fs::exists(root + "/run/attempts")) << "the earlier attempt was left moved away";
  EXPECT_FALSE(fs::exists(root + "/work/jobs/again")) << "the agent was asked to start the job";
  EXPECT_FALSE(Contains(ReadWholeFile(root + "/launch.out"), "launching job")) << ReadWholeFile(root + "/launch.out");
}

// One certificate per node (scripts/make-cluster-credentials --node): a node's key lets
// it serve as that node only. With node a's certificate and the token, no other agent
// can be called (the certificate is a server's, not a client's); the head refuses an
// agent whose certificate names another host than the one it dials, and, reading the
// CA's revocation list, one whose certificate is on it; an agent refuses the head's
// certificate once the list has it.
TEST(Credentials, ANodesCertificateServesAsThatNodeOnly) {
  ScratchDir dir("per-node");
  const std::string& root = dir.path();
  const std::string make = POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials";
  const auto made = RunProcess(Command({make, root + "/creds", "--node", "a=127.0.0.1", "--node", "b=127.0.0.1",
                                        "--node", "elsewhere=10.9.9.9"}),
                               root);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::vector<std::unique_ptr<ChildProcess>> agents;
  // An agent serving `certificate`.pem (default: the node's), reading the list unless
  // `with_list` is false.
  auto start = [&](const std::string& node, std::string certificate = "", bool with_list = true) {
    if (certificate.empty()) certificate = "creds/nodes/" + node;
    fs::create_directories(root + "/" + node);
    const std::string config = dir.Write(
        node + ".yaml",
        "listen: 127.0.0.1:0\ncredentials: {ca: creds/ca.pem, cert: " + certificate + ".pem, key: " + certificate +
            ".key, token: creds/token" + (with_list ? ", crl: creds/crl" : "") + "}\nwork_dir: " + node +
            "\nworker: " POPLAR_WORKER_BINARY "\ngpus: none\nemulated:\n  - {type: emu, threads: 1, memory_mib: 16}\n");
    const std::string port_file = root + "/" + node + ".port";
    fs::remove(port_file);
    ChildOptions options;
    options.argv = {POPLAR_AGENT_BINARY, "--config", config, "--port-file", port_file};
    options.stderr_path = root + "/" + node + ".log";
    agents.push_back(std::make_unique<ChildProcess>(options));
    for (int i = 0; i < 300 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(fs::exists(port_file)) << ReadWholeFile(root + "/" + node + ".log");
    return fs::exists(port_file) ? std::stoi(ReadTextFile(port_file)) : 0;
  };
  // `poplar status` of the agent at `port` with the head's `head`.pem, reading the list
  // when `with_list`.
  auto status = [&](int port, const std::string& head, bool with_list = false) {
    const std::string cluster =
        dir.Write("cluster.yaml",
                  "name: c\ntraining: {global_batch: 8, precision: fp32}\n"
                  "credentials: {ca: creds/ca.pem, cert: " +
                      head + ".pem, key: " + head + ".key, token: creds/token" + (with_list ? ", crl: creds/crl" : "") +
                      "}\n"
                      "nodes:\n  - {name: n, host: 127.0.0.1, agent: \"127.0.0.1:" +
                      std::to_string(port) + "\", devices: [{type: emu, count: 1}]}\n");
    return RunProcess(Command({POPLAR_BINARY, "status", cluster}), root, std::chrono::seconds(60));
  };
  const std::string c = root + "/creds/";
  const std::string token = ReadToken(c + "token");
  const int a = start("a");
  const int b = start("b");
  EXPECT_TRUE(Describe(*Stub(b, c + "ca.pem", c + "head.key", c + "head.pem", token)).ok());
  const auto as_node_a = Describe(*Stub(b, c + "ca.pem", c + "nodes/a.key", c + "nodes/a.pem", token));
  EXPECT_FALSE(as_node_a.ok()) << "agent b obeyed node a's certificate";
  EXPECT_EQ(status(a, "creds/head").exit_code, 0);

  // An agent serving node elsewhere's certificate at 127.0.0.1, where the head dials node n.
  const auto impostor = status(start("elsewhere"), "creds/head");
  EXPECT_EQ(impostor.exit_code, 1);
  EXPECT_TRUE(ContainsAll(impostor.out, {"DOWN", "does not name 127.0.0.1"})) << impostor.out;

  // Node b's certificate revoked: a head that reads the list refuses an agent serving it
  // (one that does not read it takes it).
  fs::copy_file(c + "nodes/b.pem", root + "/old-b.pem");
  fs::copy_file(c + "nodes/b.key", root + "/old-b.key");
  ASSERT_EQ(RunProcess(Command({make, root + "/creds", "--revoke", "b"}), root).exit_code, 0);
  const int revoked_b = start("revoked-b", "old-b", false);
  const auto to_revoked = status(revoked_b, "creds/head", true);
  EXPECT_EQ(to_revoked.exit_code, 1);
  EXPECT_TRUE(Contains(to_revoked.out, "DOWN")) << to_revoked.out;
  EXPECT_EQ(status(revoked_b, "creds/head").exit_code, 0);
  EXPECT_EQ(status(a, "creds/head", true).exit_code, 0) << "the list refused a node it does not hold";

  // The head's certificate revoked: agents started with the new list refuse it, and take
  // the head's new one.
  fs::copy_file(c + "head.pem", root + "/old-head.pem");
  fs::copy_file(c + "head.key", root + "/old-head.key");
  const auto revoked = RunProcess(Command({make, root + "/creds", "--revoke", "head"}), root);
  ASSERT_EQ(revoked.exit_code, 0) << revoked.err;
  ASSERT_EQ(RunProcess(Command({make, root + "/creds", "--new-head"}), root).exit_code, 0);
  for (auto& agent : agents) agent->Signal(SIGTERM);
  for (auto& agent : agents) agent->Wait(std::chrono::seconds(30));
  const int restarted = start("a");
  const auto old_head = status(restarted, "old-head");
  EXPECT_EQ(old_head.exit_code, 1);
  EXPECT_TRUE(Contains(old_head.out, "DOWN")) << old_head.out;
  const auto new_head = status(restarted, "creds/head");
  EXPECT_EQ(new_head.exit_code, 0) << new_head.out << new_head.err;

  // An agent's list must be its CA's: a folder without one is named when it starts.
  fs::create_directories(root + "/empty-crl");
  std::string config = ReadTextFile(root + "/a.yaml");
  config.replace(config.find("crl: creds/crl"), 14, "crl: empty-crl");
  config.replace(config.find("work_dir: a"), 11, "work_dir: b");  // a's is held by the agent above
  const auto no_list = RunProcess(Command({POPLAR_AGENT_BINARY, "--config", dir.Write("no-list.yaml", config)}), root,
                                  std::chrono::seconds(60));
  EXPECT_EQ(no_list.exit_code, 1);
  EXPECT_TRUE(ContainsAll(no_list.err, {"no-list.yaml: credentials.crl", "holds no valid revocation list"}))
      << no_list.err;
}

// An agent that cannot serve says which key of its file is at fault: a port out of range
// (gRPC would listen on it modulo 65536), or credentials whose key is not the
// certificate's (not `listen`).
// `poplar-agent --free-port` (what `poplar launch --slurm` asks rank 0's node for the
// rendezvous) prints one port below the kernel's ephemeral range that can be bound.
TEST(AgentFreePort, PrintsAPortBelowTheEphemeralRangeThatCanBeBound) {
  ScratchDir dir("agent-free-port");
  const auto printed = RunProcess(Command({POPLAR_AGENT_BINARY, "--free-port"}), dir.path());
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  ASSERT_FALSE(printed.out.empty());
  EXPECT_EQ(printed.out.find('\n'), printed.out.size() - 1) << printed.out;
  const int port = std::stoi(printed.out);
  EXPECT_GE(port, 1024);
  EXPECT_LT(port, EphemeralPortRange().first);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << strerror(errno);
  ::close(fd);
}

// `poplar-agent --list-gpus` inside a Slurm step lists the GPUs the job holds
// (SLURM_STEP_GPUS), each with the UUID its rank is started on, and says why when it
// holds none of them.
TEST(AgentListGpus, InsideASlurmStepListsTheJobsGpusOnly) {
  ScratchDir dir("agent-list-gpus");
  const auto list = [&](const std::map<std::string, std::string>& env) {
    ChildOptions options = Command({POPLAR_AGENT_BINARY, "--list-gpus", "--nvml-library", FAKE_NVML_LIBRARY});
    options.env = env;
    options.env["FAKE_NVML_GPUS"] = "NVIDIA H200|150754820096|9.0||0;NVIDIA H200|150754820096|9.0||1";
    options.env["SLURMD_NODENAME"] = "gpu7";
    return RunProcess(options, dir.path());
  };
  const auto all = list({});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(nlohmann::json::parse(all.out)["gpus"].size(), 2u) << all.out;
  const auto held = list({{"SLURM_STEP_GPUS", "1"}, {"SLURM_JOB_GPUS", "0,1"}});
  ASSERT_EQ(held.exit_code, 0) << held.err;
  const auto line = nlohmann::json::parse(held.out);
  EXPECT_EQ(line["node"], "gpu7");
  ASSERT_EQ(line["gpus"].size(), 1u) << held.out;
  EXPECT_EQ(line["gpus"][0]["index"], 1);
  EXPECT_EQ(line["gpus"][0]["uuid"], "GPU-fake-1");
  const auto none = list({{"SLURM_JOB_GPUS", "3"}});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(Contains(none.out, "the Slurm job holds none of the node's 2 GPUs (SLURM_JOB_GPUS=3)")) << none.out;
  const auto bad = list({{"SLURM_JOB_GPUS", "gpu:1"}});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(ContainsAll(bad.err, {"SLURM_JOB_GPUS", "'gpu:1' is not a list of GPU ids"})) << bad.err;
}

TEST(AgentStart, NamesTheListenPortOrTheCredentialsThatStopIt) {
  ScratchDir dir("agent-start");
  const auto made = RunProcess(
      Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", dir.path() + "/creds", "--node", "a=127.0.0.1"}),
      dir.path());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  fs::create_directories(dir.path() + "/work");
  auto write = [&](const std::string& listen, const std::string& key) {
    return dir.Write("agent.yaml", "listen: " + listen +
                                       "\ncredentials: {ca: creds/ca.pem, cert: creds/nodes/a.pem, key: " + key +
                                       ", token: creds/token}\nwork_dir: work\nworker: " POPLAR_WORKER_BINARY
                                       "\ngpus: none\nemulated:\n  - {type: emu, threads: 1, memory_mib: 16}\n");
  };
  auto start = [&](const std::string& listen, const std::string& key) {
    const std::string config = write(listen, key);
    return RunProcess(Command({POPLAR_AGENT_BINARY, "--config", config}), dir.path(), std::chrono::seconds(60));
  };
  const auto port = start("127.0.0.1:99999", "creds/nodes/a.key");
  EXPECT_EQ(port.exit_code, 1);
  EXPECT_TRUE(ContainsAll(port.err, {"agent.yaml", "listen", "port must be a number from 0", "'99999'"})) << port.err;
  const auto key = start("127.0.0.1:0", "creds/head.key");  // another certificate's key
  EXPECT_EQ(key.exit_code, 1);
  EXPECT_TRUE(ContainsAll(key.err,
                          {"agent.yaml: credentials", "cannot use these files for TLS", "(gRPC: Invalid private key;"}))
      << key.err;
  EXPECT_FALSE(Contains(key.err, "cannot listen")) << key.err;
  // gRPC's reason is in the one line, not in log lines before it.
  EXPECT_TRUE(poplar::testing::IsOneLine(key.err)) << key.err;
  // An emulated type the cluster files refuse could never be used: refused here too.
  std::string dots = ReadTextFile(write("127.0.0.1:0", "creds/nodes/a.key"));
  dots.replace(dots.find("type: emu"), 9, "type: ..");
  const auto bad_type =
      RunProcess(Command({POPLAR_AGENT_BINARY, "--config", dir.Write("dots.yaml", dots)}), dir.path());
  EXPECT_EQ(bad_type.exit_code, 1);
  EXPECT_TRUE(ContainsAll(bad_type.err, {"emulated[0].type", "must be a plain name", "got '..'"})) << bad_type.err;
  // A worker that is not poplar-worker is refused (coreutils' true answers --version too).
  std::string config = ReadTextFile(write("127.0.0.1:0", "creds/nodes/a.key"));
  config.replace(config.find("worker: "), config.find('\n', config.find("worker: ")) - config.find("worker: "),
                 "worker: /bin/true");
  const auto not_worker =
      RunProcess(Command({POPLAR_AGENT_BINARY, "--config", dir.Write("true.yaml", config)}), dir.path());
  EXPECT_EQ(not_worker.exit_code, 1);
  EXPECT_TRUE(ContainsAll(not_worker.err, {"true.yaml: worker: /bin/true does not answer --version like poplar-worker",
                                           "(it said 'true (GNU coreutils)", "' and exited with status 0)"}))
      << not_worker.err;
  // An unknown flag is named (CLI11 would name only the missing --config).
  const auto flag = RunProcess(Command({POPLAR_AGENT_BINARY, "--bogus"}), dir.path());
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_TRUE(Contains(flag.err, "--bogus")) << flag.err;
  // --port-file never replaces what the agent reads (its own agent file, the cluster's
  // token), and is refused before it listens.
  const std::string agent_file = write("127.0.0.1:0", "creds/nodes/a.key");
  const std::string agent_text = ReadTextFile(agent_file);
  const std::string token_text = ReadTextFile(dir.path() + "/creds/token");
  for (const auto& [target, what] : std::vector<std::pair<std::string, std::string>>{
           {agent_file, "is the agent file (--config)"}, {dir.path() + "/creds/token", "is the credentials' token"}}) {
    const auto over = RunProcess(Command({POPLAR_AGENT_BINARY, "--config", agent_file, "--port-file", target}),
                                 dir.path(), std::chrono::seconds(60));
    EXPECT_EQ(over.exit_code, 1) << over.err;
    EXPECT_TRUE(ContainsAll(over.err, {"--port-file", what, "writing there would destroy it"})) << over.err;
    EXPECT_FALSE(Contains(over.err, "listening on")) << over.err;
  }
  EXPECT_EQ(ReadTextFile(agent_file), agent_text);
  EXPECT_EQ(ReadTextFile(dir.path() + "/creds/token"), token_text);
}

}  // namespace
}  // namespace poplar
