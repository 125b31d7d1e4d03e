// poplar under a real one-node Slurm (scripts/slurm-local: munged, slurmctld, slurmd on
// loopback, started here and stopped after): poplar-worker as Slurm's tasks, each rank
// taking RANK, WORLD_SIZE and LOCAL_RANK from SLURM_PROCID, SLURM_NTASKS and
// SLURM_LOCALID, trains as the same plan's ranks started with torchrun's environment;
// `poplar launch --slurm` inside an allocation trains as the same plan launched through
// an agent, and a cancelled job leaves a checkpoint it resumes from. If Slurm cannot
// start, the test fails saying why.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"
#include "planner/base/free_port.h"
#include "planner/base/text_file.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

class LocalSlurm : public ::testing::Test {
 protected:
  void SetUp() override {
    const ProcessOutcome started =
        RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/slurm-local", "start", scratch_.path() + "/slurm", "2"}),
                   scratch_.path(), std::chrono::seconds(60));
    ASSERT_EQ(started.exit_code, 0) << "Slurm did not start: " << started.err;
    slurm_conf_ = started.out.substr(0, started.out.find('\n'));
  }
  void TearDown() override {
    RunProcess(Command({POPLAR_SOURCE_DIR "/scripts/slurm-local", "stop", scratch_.path() + "/slurm"}), scratch_.path(),
               std::chrono::seconds(60));
  }

  ScratchDir scratch_{"poplar_slurm"};
  std::string slurm_conf_;
};

namespace fs = std::filesystem;

// The devices of node poplar1, as its agent file and the cluster file's slurm section
// declare them.
constexpr char kDevices[] =
    "[{type: emu-fast, threads: 1, slowdown: 1.0, memory_mib: 48}, "
    "{type: emu-slow, threads: 1, slowdown: 2.5, memory_mib: 20}]";

// A cluster of one node, poplar1, with the two devices of kDevices: through its agent
// (`agent_port`) or under Slurm. Job files are relative to the scratch folder, which is
// the agent's work_dir and the folder poplar launch runs in under Slurm.
std::string WriteSlurmCluster(const ScratchDir& scratch, int agent_port, int steps) {
  return scratch.Write(
      "cluster.yaml",
      "name: slurm-e2e\n"
      "training: {global_batch: 16, precision: fp32, stage: 2}\n"
      "network:\n  intra_node: {bandwidth_gbps: 20, latency_us: 30}\n"
      "credentials: {ca: creds/ca.pem, cert: creds/head.pem, key: creds/head.key, token: creds/token}\n"
      "job: {model: " POPLAR_SOURCE_DIR "/configs/models/gpt-tiny.json, data: tokens.bin, steps: " +
          std::to_string(steps) +
          ", lr: 3e-3, warmup_steps: 2, checkpoint_every: 2}\n"
          "nodes:\n  - {name: poplar1, host: 127.0.0.1, agent: \"127.0.0.1:" +
          std::to_string(agent_port) +
          "\", devices: [{type: emu-fast, count: 1}, {type: emu-slow, count: 1}]}\n"
          "slurm:\n  gpus: none\n  emulated: " +
          kDevices + "\n");
}

// The plan both launches follow: rank 0 on emu-fast, rank 1 on emu-slow, at stage 2.
std::string WriteNodePlan(const ScratchDir& scratch) {
  nlohmann::json plan = {{"stage", 2}, {"global_batch", 16}};
  plan["ranks"] = {
      {{"rank", 0}, {"node", "poplar1"}, {"host", "127.0.0.1"}, {"device_type", "emu-fast"}, {"micro_batches", {6, 4}}},
      {{"rank", 1}, {"node", "poplar1"}, {"device_type", "emu-slow"}, {"micro_batches", {4, 2}}}};
  return scratch.Write("plan.json", plan.dump(2));
}

// `poplar ARGS` inside a new allocation of the local Slurm (salloc), from the scratch folder.
ChildOptions InAllocation(const ScratchDir& scratch, const std::string& slurm_conf,
                          const std::vector<std::string>& args, int tasks = 2) {
  std::vector<std::string> argv = {"/usr/bin/salloc", "--nodes=1", "--ntasks=" + std::to_string(tasks), "--quiet",
                                   POPLAR_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildOptions options = Command(argv);
  options.cwd = scratch.path();
  options.env = {{"SLURM_CONF", slurm_conf}};
  return options;
}

std::vector<double> Losses(const std::string& metrics_file) {
  std::vector<double> losses;
  for (const std::string& line : ReadLines(metrics_file)) losses.push_back(nlohmann::json::parse(line)["loss"]);
  return losses;
}

TEST_F(LocalSlurm, LaunchInsideAnAllocationTrainsAsThroughAnAgent) {
  const std::string& root = scratch_.path();
  const ProcessOutcome made = RunProcess(
      Command({POPLAR_SOURCE_DIR "/scripts/make-cluster-credentials", root + "/creds", "--node", "poplar1=127.0.0.1"}),
      root);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  WriteTokens(scratch_, 6000);
  const std::string agent_file = scratch_.Write(
      "agent.yaml",
      "listen: 127.0.0.1:0\n"
      "credentials: {ca: creds/ca.pem, cert: creds/nodes/poplar1.pem, key: creds/nodes/poplar1.key, token: "
      "creds/token, crl: creds/crl}\n"
      "work_dir: .\ncache_dir: agent-cache\nworker: " POPLAR_WORKER_BINARY "\ngpus: none\nemulated: " +
          std::string(kDevices) + "\n");
  ChildOptions agent_options = Command({POPLAR_AGENT_BINARY, "--config", agent_file, "--port-file", root + "/port"});
  agent_options.stderr_path = root + "/agent.log";
  ChildProcess agent(agent_options);
  for (int i = 0; i < 300 && !fs::exists(root + "/port"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(root + "/port")) << ReadWholeFile(root + "/agent.log");
  WriteSlurmCluster(scratch_, std::stoi(ReadTextFile(root + "/port")), 6);
  WriteNodePlan(scratch_);

  const ProcessOutcome agents =
      RunProcess(Command({POPLAR_BINARY, "launch", root + "/cluster.yaml", "--plan", root + "/plan.json", "--job-id",
                          "agents", "--run-dir", root + "/runs/agents"}),
                 root, std::chrono::seconds(180));
  ASSERT_EQ(agents.exit_code, 0) << agents.out << agents.err;
  const ProcessOutcome slurm =
      RunProcess(InAllocation(scratch_, slurm_conf_,
                              {"launch", "cluster.yaml", "--slurm", "--plan", "plan.json", "--job-id", "slurm",
                               "--worker", POPLAR_WORKER_BINARY, "--timeline"}),
                 root, std::chrono::seconds(180));
  std::cout << slurm.out;
  ASSERT_EQ(slurm.exit_code, 0) << slurm.out << slurm.err;
  EXPECT_NE(slurm.out.find("Slurm job "), std::string::npos) << slurm.out;
  EXPECT_NE(slurm.out.find("poplar1 (127.0.0.1: 1 x emu-fast, 1 x emu-slow)"), std::string::npos) << slurm.out;
  EXPECT_NE(slurm.out.find("as one srun step"), std::string::npos) << slurm.out;
  // The allocation's 2 CPUs (--ntasks=2), one for each rank.
  EXPECT_NE(slurm.out.find("2 ranks on 1 node (1 CPU each)"), std::string::npos) << slurm.out;
  EXPECT_NE(slurm.out.find("trained 6 steps"), std::string::npos) << slurm.out;

  const double difference =
      MaxAbsDifference(ReadStateDict(root + "/jobs/agents/model.pt"), ReadStateDict(root + "/runs/slurm/model.pt"));
  std::cout << "max |difference| (agent vs Slurm) = " << difference << "\n";
  EXPECT_EQ(difference, 0.0) << "the same plan, devices and data: the same arithmetic";
  for (int rank = 0; rank < 2; ++rank) {
    const std::string file = "/metrics/rank-" + std::to_string(rank) + ".jsonl";
    const std::vector<double> through_agent = Losses(root + "/runs/agents" + file);
    EXPECT_EQ(through_agent.size(), 6u) << "rank " << rank;
    EXPECT_EQ(Losses(root + "/runs/slurm" + file), through_agent) << "rank " << rank;
  }
  const auto summary = nlohmann::json::parse(ReadTextFile(root + "/runs/slurm/summary.json"));
  EXPECT_EQ(summary["ok"], true);
  EXPECT_EQ(summary["steps"], 6);
  EXPECT_TRUE(fs::exists(root + "/runs/slurm/timeline.json"));
  EXPECT_TRUE(fs::exists(root + "/runs/slurm/checkpoints/latest"));
}

TEST_F(LocalSlurm, ACancelledJobKeepsItsCheckpointAndResumes) {
  const std::string& root = scratch_.path();
  WriteTokens(scratch_, 6000);
  // No agent: its address is only written, never called.
  WriteSlurmCluster(scratch_, 1, 400);
  WriteNodePlan(scratch_);
  const std::string script = scratch_.Write("train.sbatch", "#!/bin/sh\nexec " POPLAR_BINARY
                                                            " launch cluster.yaml --slurm --plan plan.json --job-id "
                                                            "cancelled --worker " POPLAR_WORKER_BINARY "\n");
  ChildOptions submit =
      Command({"/usr/bin/sbatch", "--parsable", "--nodes=1", "--ntasks=2", "--output=" + root + "/batch.out", script});
  submit.cwd = root;
  submit.env = {{"SLURM_CONF", slurm_conf_}};
  const ProcessOutcome submitted = RunProcess(submit, root);
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job = submitted.out.substr(0, submitted.out.find_first_of(";\n"));
  const std::string metrics = root + "/runs/cancelled/metrics/rank-0.jsonl";
  for (int i = 0; i < 1200 && (!fs::exists(metrics) || ReadLines(metrics).size() < 7); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(ReadLines(metrics).size(), 7u) << ReadWholeFile(root + "/batch.out");
  ChildOptions cancel = Command({"/usr/bin/scancel", job});
  cancel.env = {{"SLURM_CONF", slurm_conf_}};
  ASSERT_EQ(RunProcess(cancel, root).exit_code, 0);
  bool ended = false;
  for (int i = 0; i < 900 && !ended; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ChildOptions queue = Command({"/usr/bin/squeue", "--noheader", "--jobs", job});
    queue.env = {{"SLURM_CONF", slurm_conf_}};
    ended = RunProcess(queue, root).out.find(job) == std::string::npos;
  }
  ASSERT_TRUE(ended) << "the cancelled job did not end";
  const std::string said = ReadWholeFile(root + "/batch.out");
  std::cout << said;
  EXPECT_NE(said.find("was stopped by the user (SIGTERM)"), std::string::npos) << said;
  const std::size_t trained = ReadLines(metrics).size();
  EXPECT_LT(trained, 400u);
  const std::string latest = ReadTextFile(root + "/runs/cancelled/checkpoints/latest");
  ASSERT_FALSE(latest.empty()) << "no checkpoint was completed";

  const ProcessOutcome resumed =
      RunProcess(InAllocation(scratch_, slurm_conf_,
                              {"launch", "cluster.yaml", "--slurm", "--plan", "plan.json", "--job-id", "cancelled",
                               "--resume", "--steps", std::to_string(trained + 3), "--worker", POPLAR_WORKER_BINARY}),
                 root, std::chrono::seconds(180));
  std::cout << resumed.out;
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from the checkpoint of step"), std::string::npos) << resumed.out;
  const auto summary = nlohmann::json::parse(ReadTextFile(root + "/runs/cancelled/summary.json"));
  EXPECT_EQ(summary["ok"], true);
  EXPECT_EQ(summary["steps"], static_cast<std::int64_t>(trained + 3));
}

// srun gives each task one CPU unless told: the launch asks for each rank's share of
// its node's CPUs, and refuses, before any worker starts, an allocation holding fewer
// CPUs than the plan's ranks, or an emulated device more threads than its share.
TEST_F(LocalSlurm, EachRankGetsItsShareOfTheNodesCpusOrTheLaunchSaysWhy) {
  const std::string& root = scratch_.path();
  WriteTokens(scratch_, 6000);
  WriteSlurmCluster(scratch_, 1, 4);  // no agent: its address is never called
  WriteNodePlan(scratch_);
  const std::vector<std::string> launch = {"launch",   "cluster.yaml", "--slurm",
                                           "--plan",   "plan.json",    "--job-id",
                                           "few-cpus", "--worker",     POPLAR_WORKER_BINARY};
  const ProcessOutcome one_cpu = RunProcess(InAllocation(scratch_, slurm_conf_, launch, 1), root);
  EXPECT_EQ(one_cpu.exit_code, 1) << one_cpu.out << one_cpu.err;
  EXPECT_NE(one_cpu.err.find("node 'poplar1' holds 1 CPU(s) of this allocation for 2 ranks of the plan"),
            std::string::npos)
      << one_cpu.err;
  EXPECT_FALSE(fs::exists(root + "/runs/few-cpus")) << "a refused launch leaves no run directory";

  std::string cluster = ReadTextFile(root + "/cluster.yaml");
  const std::string one_thread = "{type: emu-slow, threads: 1";
  ASSERT_NE(cluster.find(one_thread), std::string::npos);
  cluster.replace(cluster.find(one_thread), one_thread.size(), "{type: emu-slow, threads: 2");
  scratch_.Write("cluster.yaml", cluster);
  const ProcessOutcome threads = RunProcess(InAllocation(scratch_, slurm_conf_, launch, 2), root);
  EXPECT_EQ(threads.exit_code, 1) << threads.out << threads.err;
  EXPECT_NE(threads.err.find("emu-slow computes with 2 threads (slurm.emulated in cluster.yaml), but each rank of "
                             "the plan gets 1 CPU of node 'poplar1' (2 CPUs for 2 ranks)"),
            std::string::npos)
      << threads.err;
  EXPECT_FALSE(fs::exists(root + "/runs/few-cpus"));
}

TEST_F(LocalSlurm, SrunTasksTrainAsTorchrunRanks) {
  WriteModelConfig(scratch_);
  WriteTokens(scratch_, 6000);
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{5, 3}, {4, 2}});
  const JobOutcome torchrun = RunJob(
      scratch_, 2, TrainCommand(scratch_, plan, 3, {"--save", "torchrun.pt", "--metrics", "torchrun-{rank}.jsonl"}));
  ASSERT_TRUE(torchrun.AllSucceeded()) << torchrun.Describe();

  std::vector<std::string> argv = {"/usr/bin/srun", "--ntasks", "2", "--kill-on-bad-exit=1", POPLAR_WORKER_BINARY};
  for (const std::string& arg :
       TrainCommand(scratch_, plan, 3, {"--save", "slurm.pt", "--metrics", "slurm-{rank}.jsonl", "--timeout", "60"})) {
    argv.push_back(arg);
  }
  ChildOptions options = Command(argv);
  options.cwd = scratch_.path();
  options.env = {
      {"SLURM_CONF", slurm_conf_}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(FindFreePort())}};
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) ASSERT_EQ(std::getenv(name), nullptr) << name;
  const ProcessOutcome slurm = RunProcess(options, scratch_.path(), std::chrono::seconds(180));
  ASSERT_EQ(slurm.exit_code, 0) << slurm.out << slurm.err;

  const double difference =
      MaxAbsDifference(ReadStateDict(scratch_.path() + "/torchrun.pt"), ReadStateDict(scratch_.path() + "/slurm.pt"));
  std::cout << "max |difference| = " << difference << "\n";
  EXPECT_EQ(difference, 0.0) << "the same plan, ranks and data: the same arithmetic";
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = ReadLines(scratch_.path() + "/slurm-" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(lines.size(), 3u) << "rank " << rank;
    const auto record = nlohmann::json::parse(lines.back());
    EXPECT_EQ(record["rank"], rank);
    EXPECT_EQ(record["world_size"], 2);
    EXPECT_EQ(record["samples"], rank == 0 ? 8 : 6);
  }
}

}  // namespace
}  // namespace poplar::testing
