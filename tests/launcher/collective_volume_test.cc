// The bytes each stage hands to its collectives per step, from the worker's metrics,
// against the communication the cost model counts (docs/cost-model.md): stage 0
// all-reduces the gradients once; stage 1 reduce-scatters them and all-gathers the
// parameters once; stage 2 reduce-scatters every round; stage 3 reduce-scatters every
// round and all-gathers each block twice per micro-batch, but the tied embedding and
// the head's final LayerNorm once.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "launcher/model/decoder.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

struct Volume {
  double all_reduced = 0;
  double reduce_scattered = 0;
  double all_gathered = 0;
};

class CollectiveVolume : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveVolume, IsWhatTheCostModelCounts) {
  const int stage = GetParam();
  ScratchDir scratch("poplar_volume");
  WriteModelConfig(scratch, 32, 16);
  WriteTokens(scratch, 4000);
  // Two rounds at stages 2-3, where rank 0 computes nothing in the second and still
  // joins its collectives (stages 0-1 have no rounds and no empty entries).
  const std::string plan = WritePlan(
      scratch, "plan.json", stage,
      stage >= 2 ? std::vector<std::vector<int>>{{3, 0}, {1, 2}} : std::vector<std::vector<int>>{{3}, {1, 2}});
  const JobOutcome job =
      RunJob(scratch, 2, TrainCommand(scratch, plan, 2, {"--metrics", scratch.path() + "/m{rank}.jsonl"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();

  const ModelConfig config{Architecture::kGpt, 2, 2, 32, 256, 16};
  const double parameters = 4.0 * config.ParameterCount();  // fp32 bytes
  const double embedding = 4.0 * (config.vocab_size + config.block_size) * config.n_embd;
  const double final_norm = 4.0 * 2 * config.n_embd;
  const int rounds = 2;
  Volume expected;
  switch (stage) {
    case 0:
      expected = {parameters, 0, 0};
      break;
    case 1:
      expected = {0, parameters, parameters};
      break;
    case 2:
      expected = {0, rounds * parameters, parameters};
      break;
    default:
      expected = {0, rounds * parameters, rounds * (2 * parameters - embedding - final_norm)};
  }
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& line : ReadLines(scratch.path() + "/m" + std::to_string(rank) + ".jsonl")) {
      const auto metrics = nlohmann::json::parse(line);
      const Volume measured{metrics["all_reduced_bytes"].get<double>(), metrics["reduce_scattered_bytes"].get<double>(),
                            metrics["all_gathered_bytes"].get<double>()};
      // Within 1% of the parameters: buckets are padded to the world size, and the loss
      // and gradient norm travel as scalars.
      const double slack = 0.01 * parameters;
      EXPECT_NEAR(measured.all_reduced, expected.all_reduced, slack) << "rank " << rank << ": " << line;
      EXPECT_NEAR(measured.reduce_scattered, expected.reduce_scattered, slack) << "rank " << rank << ": " << line;
      EXPECT_NEAR(measured.all_gathered, expected.all_gathered, slack) << "rank " << rank << ": " << line;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, CollectiveVolume, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "Stage" + std::to_string(info.param); });

// A step's compute, communication and optimizer times are disjoint parts of it, so they
// add up to at most the step: at stage 3 the gathers wait inside forward and backward,
// and those waits count in communication_s, not in compute_s as well.
TEST(StepTimes, ComputeCommunicationAndOptimizerAddUpToAtMostTheStep) {
  ScratchDir scratch("poplar_step_times");
  WriteModelConfig(scratch, 256, 64, 8, 4);
  WriteTokens(scratch, 8000);
  const std::string plan = WritePlan(scratch, "plan.json", 3, {{4, 4}, {4, 4}});
  const JobOutcome job = RunJob(
      scratch, 2, TrainCommand(scratch, plan, 3, {"--metrics", scratch.path() + "/m{rank}.jsonl", "--threads", "1"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& line : ReadLines(scratch.path() + "/m" + std::to_string(rank) + ".jsonl")) {
      const auto metrics = nlohmann::json::parse(line);
      const double parts = metrics["compute_s"].get<double>() + metrics["communication_s"].get<double>() +
                           metrics["optimizer_s"].get<double>();
      EXPECT_GT(metrics["communication_s"].get<double>(), 0) << line;
      EXPECT_LE(parts, metrics["step_s"].get<double>() * 1.001 + 1e-4) << "rank " << rank << ": " << line;
    }
  }
}

}  // namespace
}  // namespace poplar::testing
