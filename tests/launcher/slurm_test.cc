// poplar-worker as Slurm's tasks: a real one-node Slurm (scripts/slurm-local: munged,
// slurmctld, slurmd on loopback, started here and stopped after), one `srun` of two
// tasks, each rank taking RANK, WORLD_SIZE and LOCAL_RANK from Slurm's SLURM_PROCID,
// SLURM_NTASKS and SLURM_LOCALID, trains as the same plan's ranks started with
// torchrun's environment. If Slurm cannot start, the test fails saying why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "child_process.h"
#include "planner/base/free_port.h"
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
