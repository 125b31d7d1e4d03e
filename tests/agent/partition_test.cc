// A network partition of a running job, made with network namespaces (as root): nodes a
// and b each run their agent in a namespace of their own, joined by a bridge where the
// head runs. Mid-training node b's link goes down: its packets are dropped and no socket
// is closed, as when a cable or a switch port fails. The job must end within the
// keepalive and collective time-outs with the cause named, leave no worker behind, and
// keep its newest checkpoint whole. Real agents, workers and `poplar launch`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "child_process.h"
#include "planner/base/text_file.h"
#include "planner/formats/checkpoint_meta.h"
#include "test_support.h"

namespace poplar::testing {
namespace {

namespace fs = std::filesystem;

// A bridge in this namespace and one namespace per node behind it, on 10.77.N.0/24
// (the head is .1, node i is .(2 + i)); all removed when it goes.
class Partitionable {
 public:
  explicit Partitionable(int nodes) : tag_("pp" + std::to_string(getpid() % 100000)) {
    subnet_ = "10.77." + std::to_string(getpid() % 250) + ".";
    Ip({"link", "add", "name", tag_ + "br", "type", "bridge"});
    Ip({"addr", "add", subnet_ + "1/24", "dev", tag_ + "br"});
    Ip({"link", "set", tag_ + "br", "up"});
    for (int i = 0; i < nodes; ++i) {
      const std::string ns = Namespace(i), outside = Port(i), inside = tag_ + "in" + std::to_string(i);
      Ip({"netns", "add", ns});
      Ip({"link", "add", outside, "type", "veth", "peer", "name", inside});
      Ip({"link", "set", inside, "netns", ns});
      Ip({"link", "set", outside, "master", tag_ + "br"});
      Ip({"link", "set", outside, "up"});
      Ip({"-n", ns, "addr", "add", Address(i) + "/24", "dev", inside});
      Ip({"-n", ns, "link", "set", inside, "up"});
      Ip({"-n", ns, "link", "set", "lo", "up"});
    }
    nodes_ = nodes;
  }
  ~Partitionable() {
    for (int i = 0; i < nodes_; ++i) {
      RunProcess(Command({"/usr/sbin/ip", "link", "del", Port(i)}), "/tmp");
      RunProcess(Command({"/usr/sbin/ip", "netns", "del", Namespace(i)}), "/tmp");
    }
    RunProcess(Command({"/usr/sbin/ip", "link", "del", tag_ + "br"}), "/tmp");
  }

  std::string Namespace(int node) const { return tag_ + "ns" + std::to_string(node); }
  std::string Address(int node) const { return subnet_ + std::to_string(2 + node); }
  // Node `node`'s port on the bridge down: what it sends and what is sent to it is dropped.
  void Cut(int node) { Ip({"link", "set", Port(node), "down"}); }
  // The nodes no longer reach one another; each still reaches the head (isolated bridge
  // ports forward only to ports that are not).
  void CutBetweenNodes() {
    for (int i = 0; i < nodes_; ++i) {
      const auto outcome =
          RunProcess(Command({"/usr/sbin/bridge", "link", "set", "dev", Port(i), "isolated", "on"}), "/tmp");
      ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
    }
  }

 private:
  std::string Port(int node) const { return tag_ + "out" + std::to_string(node); }
  void Ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/sbin/ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto outcome = RunProcess(Command(argv), "/tmp");
    ASSERT_EQ(outcome.exit_code, 0) << "ip " << args[0] << " " << args[1] << ": " << outcome.err;
  }

  std::string tag_, subnet_;
  int nodes_ = 0;
};

// Whether process `pid` runs (it is not a zombie waiting to be reaped).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string skipped, state;
  return stat >> skipped >> skipped >> state && state != "Z";
}

// Processes whose command line holds `text`.
std::vector<pid_t> ProcessesWith(const std::string& text) {
  std::vector<pid_t> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream file(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (cmdline.find(text) != std::string::npos && std::stoi(name) != getpid()) found.push_back(std::stoi(name));
  }
  return found;
}

// Trains on nodes a and b, makes `cut` once a checkpoint is written, and checks how the
// launch ends: exit 1 within the time-outs, its error holding `cause`, no worker left,
// the newest checkpoint whole.
void CutMidTraining(const std::function<void(Partitionable&)>& cut, std::initializer_list<std::string> cause) {
  ScratchDir dir("partition");
  const std::string& root = dir.path();
  Partitionable network(2);
  const std::string nodes[] = {"a", "b"};
  const auto made = RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", root + "/creds",
                                        "--node", "a=" + network.Address(0), "--node", "b=" + network.Address(1)}),
                               root);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string text;
  while (text.size() < 20000) text += "the quick brown fox jumps over the lazy dog. ";
  std::vector<std::unique_ptr<ChildProcess>> agents;
  std::vector<int> ports;
  for (int i = 0; i < 2; ++i) {
    const std::string& node = nodes[i];
    std::string tokens;
    for (unsigned char c : text) tokens += std::string{static_cast<char>(c), '\0'};
    dir.Write(node + "/work/tokens.bin", tokens);
    const std::string config = dir.Write(
        node + ".yaml", "listen: " + network.Address(i) + ":0\ncredentials: {ca: creds/ca.pem, cert: creds/nodes/" +
                            node + ".pem, key: creds/nodes/" + node + ".key, token: creds/token}\nwork_dir: " + node +
                            "/work\nworker: " POPLAR_WORKER_BINARY "\ngpus: none\nemulated:\n  - {type: emu-" + node +
                            ", threads: 1, memory_mib: 48}\n");
    ChildOptions options;
    options.argv = {"/usr/sbin/ip", "netns", "exec",        network.Namespace(i),       POPLAR_AGENT_BINARY,
                    "--config",     config,  "--port-file", root + "/" + node + ".port"};
    options.stderr_path = root + "/" + node + ".log";
    agents.push_back(std::make_unique<ChildProcess>(options));
  }
  for (int i = 0; i < 2; ++i) {
    const std::string port_file = root + "/" + nodes[i] + ".port";
    for (int t = 0; t < 300 && !fs::exists(port_file); ++t) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(fs::exists(port_file)) << ReadWholeFile(root + "/" + nodes[i] + ".log");
    ports.push_back(std::stoi(ReadTextFile(port_file)));
  }
  std::string cluster =
      "name: partition\ntraining: {global_batch: 8, precision: fp32, stage: 2}\n"
      "network:\n  inter_node: {bandwidth_gbps: 10, latency_us: 50}\n"
      "credentials: {ca: creds/ca.pem, cert: creds/head.pem, key: creds/head.key, token: creds/token}\n"
      "job: {model: " POPLAR_SOURCE_DIR
      "/configs/models/gpt-tiny.json, data: tokens.bin, steps: 100000, "
      "checkpoint_every: 3}\nnodes:\n";
  for (int i = 0; i < 2; ++i) {
    cluster += "  - {name: " + nodes[i] + ", host: " + network.Address(i) + ", agent: \"" + network.Address(i) + ":" +
               std::to_string(ports[i]) + "\", devices: [{type: emu-" + nodes[i] + ", count: 1}]}\n";
  }
  dir.Write("cluster.yaml", cluster);
  dir.Write("plan.json", R"({"stage": 2, "global_batch": 8, "ranks": [{"rank": 0, "node": "a", "host": ")" +
                             network.Address(0) +
                             R"(", "device_type": "emu-a", "micro_batches": [4]}, {"rank": 1, "node": "b", "host": ")" +
                             network.Address(1) + R"(", "device_type": "emu-b", "micro_batches": [4]}]})");

  ChildOptions launch_options;
  launch_options.argv = {POPLAR_BINARY, "launch",    "cluster.yaml", "--plan",    "plan.json", "--job-id",
                         "cut",         "--run-dir", "run",          "--timeout", "20"};
  launch_options.cwd = root;
  launch_options.stdout_path = root + "/launch.out";
  launch_options.stderr_path = root + "/launch.err";
  ChildProcess launch(launch_options);
  // Training, with a checkpoint written: rank 0 (node a) keeps them.
  const std::string checkpoints = root + "/a/work/jobs/cut/checkpoints";
  for (int t = 0; t < 1200 && !fs::exists(checkpoints + "/latest"); ++t) {
    ASSERT_TRUE(Running(launch.pid())) << "the launch ended before training\n"
                                       << ReadWholeFile(root + "/launch.out") << ReadWholeFile(root + "/launch.err");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(fs::exists(checkpoints + "/latest")) << ReadWholeFile(root + "/launch.out");

  cut(network);
  const auto cut_at = std::chrono::steady_clock::now();
  const int status = launch.Wait(std::chrono::seconds(180));
  const double noticed = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count();
  ::testing::Test::RecordProperty("seconds_to_end", std::to_string(noticed));
  const std::string out = ReadWholeFile(root + "/launch.out"), err = ReadWholeFile(root + "/launch.err");
  std::cout << "the launch ended " << noticed << " s after the cut: " << err << std::flush;
  EXPECT_EQ(status, 1) << out << err;
  EXPECT_TRUE(ContainsAll(err, cause)) << err;
  // Within the keepalive (10 s + 10 s) and the collectives' time-out (20 s), with slack.
  EXPECT_LT(noticed, 90) << out << err;

  // No worker of the job is left on either node once the agents have stopped it (node b's
  // agent learns of it when its keepalive to the head fails).
  std::vector<pid_t> left;
  for (int t = 0; t < 600; ++t) {
    left = ProcessesWith(root + "/a/work/jobs/cut/");
    const std::vector<pid_t> on_b = ProcessesWith(root + "/b/work/jobs/cut/");
    left.insert(left.end(), on_b.begin(), on_b.end());
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(left.empty()) << left.size() << " worker(s) of the job still run, pid " << left.front();

  // The newest checkpoint is whole: `latest` names a step folder with its three files.
  const std::string latest = checkpoints + "/" + Trimmed(ReadTextFile(checkpoints + "/latest"));
  const CheckpointMeta meta = ParseCheckpointMeta(ReadTextFile(latest + "/meta.json"), latest + "/meta.json");
  EXPECT_GT(meta.step, 0);
  EXPECT_GT(fs::file_size(latest + "/model.pt"), 0u);
  EXPECT_GT(fs::file_size(latest + "/optimizer.pt"), 0u);
  for (auto& agent : agents) agent->Signal(SIGTERM);
  for (auto& agent : agents) agent->Wait(std::chrono::seconds(30));
}

// Node b cut off from everyone: the head's keepalive to its agent fails first.
TEST(Partition, ANodeCutOffMidTrainingEndsTheJobWithItsCause) {
  CutMidTraining([](Partitionable& network) { network.Cut(1); }, {"node 'b': lost its agent", "during the job"});
}

// Nodes a and b cut from each other, each still talking to the head: the ranks'
// collectives time out (--timeout 20).
TEST(Partition, NodesCutFromEachOtherEndTheJobAtTheCollectivesTimeOut) {
  CutMidTraining([](Partitionable& network) { network.CutBetweenNodes(); },
                 {"rank ", "not every rank took part within --timeout"});
}

}  // namespace
}  // namespace poplar::testing
