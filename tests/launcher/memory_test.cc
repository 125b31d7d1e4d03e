// Measured model-state memory per rank agrees with the planner's ZeRO accounting
// (planner/model/memory_model.h) within 10%, for stages 0-3; an emulated device counts
// its own memory, not the host's.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "launcher/device/counting_allocator.h"
#include "launcher/model/decoder.h"
#include "planner/model/memory_model.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

TEST(ModelConfig, ParameterCountMatchesTheModel) {
  ModelConfig config{Architecture::kGpt, 3, 4, 48, 256, 24};
  Decoder model = MakeDecoder(config);
  std::int64_t total = 0;
  for (const auto& [name, parameter] : model->NamedParameters()) total += parameter.numel();
  EXPECT_EQ(config.ParameterCount(), total);
}

// (stage, precision): fp32, or bf16 mixed precision (2 + 2 + 12 bytes per parameter).
class StateMemory : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(StateMemory, AgreesWithTheZeroAccounting) {
  const auto [stage, precision] = GetParam();
  ScratchDir scratch("poplar_memory");
  WriteModelConfig(scratch, 128, 16);
  WriteTokens(scratch, 4000);
  const std::string plan = WritePlan(scratch, "plan.json", stage, {{3, 1}, {2, 2}});
  const JobOutcome job = RunJob(
      scratch, 2,
      TrainCommand(scratch, plan, 4, {"--metrics", scratch.path() + "/m{rank}.jsonl", "--precision", precision}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();

  const ModelConfig config{Architecture::kGpt, 2, 2, 128, 256, 16};
  const std::int64_t expected =
      ModelStatesPerRank(config.ParameterCount(), stage, 2, precision == "bf16" ? Precision::kMixed : Precision::kFp32)
          .Total();
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = ReadLines(scratch.path() + "/m" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(lines.size(), 4u);
    // The state a rank carries between steps is the same every step; a finished
    // collective's buffers may still be on their way out on Gloo's threads when a step
    // starts, so the smallest reading over the steps is the state.
    std::int64_t measured = std::numeric_limits<std::int64_t>::max();
    for (const auto& line : lines) {
      measured = std::min(measured, nlohmann::json::parse(line)["state_bytes"].get<std::int64_t>());
    }
    std::cout << "[ " << precision << " stage " << stage << " rank " << rank << " ] measured " << measured
              << " bytes, ZeRO accounting " << expected << " bytes\n";
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(expected), 0.10 * expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, StateMemory,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(std::string("fp32"), std::string("bf16"))),
                         [](const auto& info) {
                           return std::get<1>(info.param) + "Stage" + std::to_string(std::get<0>(info.param));
                         });

// With uneven state shares each rank carries its own fraction of the partitioned states,
// as ModelStatesForShare says: the slices are real, not the even split relabelled.
class UnevenStateMemory : public ::testing::TestWithParam<int> {};

TEST_P(UnevenStateMemory, EachRankCarriesItsShare) {
  const int stage = GetParam();
  const std::vector<double> shares = {3, 1};
  ScratchDir scratch("poplar_memory_uneven");
  WriteModelConfig(scratch, 128, 16);
  WriteTokens(scratch, 4000);
  const std::string plan = WritePlan(scratch, "plan.json", stage, {{2, 2}, {2, 2}}, shares);
  const JobOutcome job =
      RunJob(scratch, 2, TrainCommand(scratch, plan, 3, {"--metrics", scratch.path() + "/m{rank}.jsonl"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const ModelConfig config{Architecture::kGpt, 2, 2, 128, 256, 16};
  for (int rank = 0; rank < 2; ++rank) {
    const std::int64_t expected =
        ModelStatesForShare(config.ParameterCount(), stage, shares[rank] / 4, Precision::kFp32).Total();
    std::int64_t measured = std::numeric_limits<std::int64_t>::max();
    for (const auto& line : ReadLines(scratch.path() + "/m" + std::to_string(rank) + ".jsonl")) {
      measured = std::min(measured, nlohmann::json::parse(line)["state_bytes"].get<std::int64_t>());
    }
    std::cout << "[ stage " << stage << " rank " << rank << " share " << shares[rank] / 4 << " ] measured " << measured
              << " bytes, accounting " << expected << " bytes\n";
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(expected), 0.10 * expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, UnevenStateMemory, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "Stage" + std::to_string(info.param); });

// The largest per-step peak of `rank` in a 2-rank run of `stage` with 1 MiB buckets, on a
// model whose parameters outweigh its activations (8 blocks of width 256, one sample of
// 16 tokens per rank): the peak is then the states plus what the step holds for the
// gradients.
std::int64_t PeakBytesOfTwoRanks(int stage) {
  ScratchDir scratch("poplar_memory_peak");
  WriteModelConfig(scratch, 256, 16, 8);
  WriteTokens(scratch, 4000);
  const std::string plan = WritePlan(scratch, "plan.json", stage, {{1}, {1}});
  const JobOutcome job = RunJob(
      scratch, 2, TrainCommand(scratch, plan, 3, {"--metrics", scratch.path() + "/m{rank}.jsonl", "--bucket-mb", "1"}));
  EXPECT_TRUE(job.AllSucceeded()) << job.Describe();
  std::int64_t peak = 0;
  for (const auto& line : ReadLines(scratch.path() + "/m1.jsonl")) {
    peak = std::max(peak, nlohmann::json::parse(line)["peak_bytes"].get<std::int64_t>());
  }
  return peak;
}

// ZeRO-2 partitions the gradients, so its peak is below ZeRO-1's, which keeps them whole.
// Stage 2 waits for its reductions as they come, not holding every bucket's whole
// gradient in flight until the round's end.
TEST(PeakMemory, StageTwoHoldsLessThanStageOneForItsGradientsAreReducedAsTheyCome) {
  const std::int64_t stage1 = PeakBytesOfTwoRanks(1);
  const std::int64_t stage2 = PeakBytesOfTwoRanks(2);
  std::cout << "[ peak bytes, 2 ranks ] stage 1 " << stage1 << ", stage 2 " << stage2 << "\n";
  EXPECT_LT(stage2, stage1);
}

// Mixed precision: the optimizer step converts one bucket's gradients to fp32 at a time.
// Converting every gradient first would take 4 bytes a parameter beside the states, at
// the step's peak, which a one-rank job on a GPU, whose CUDA graphs keep the activations'
// memory in a pool of their own, cannot fit into freed activation memory.
TEST(PeakMemory, TheMixedPrecisionStepHoldsOneBucketOfFp32GradientsAtATime) {
  ScratchDir scratch("poplar_memory_step");
  WriteModelConfig(scratch, 256, 16, 8);  // parameters outweigh one sample's activations
  WriteTokens(scratch, 4000);
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{1}});
  const JobOutcome job =
      RunJob(scratch, 1,
             TrainCommand(scratch, plan, 3,
                          {"--metrics", scratch.path() + "/m{rank}.jsonl", "--precision", "bf16", "--bucket-mb", "1"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const std::int64_t params = ModelConfig{Architecture::kGpt, 8, 2, 256, 256, 16}.ParameterCount();
  std::int64_t above_states = 0;
  for (const auto& line : ReadLines(scratch.path() + "/m0.jsonl")) {
    const auto metrics = nlohmann::json::parse(line);
    above_states =
        std::max(above_states, metrics["peak_bytes"].get<std::int64_t>() - metrics["state_bytes"].get<std::int64_t>());
  }
  std::cout << "[ bf16 step ] " << above_states << " bytes above the states at the peak; " << params << " parameters\n";
  EXPECT_LT(above_states, 2 * params);  // every gradient in fp32 at once: 4 bytes a parameter
}

// A checkpoint's copies are in the host's RAM on a GPU: on an emulated device they are
// neither counted nor held to its capacity, which would otherwise refuse a micro-batch
// the plan sized while a checkpoint is written in the background.
TEST(CountingAllocator, HostMemoryIsNeitherCountedNorHeldToTheCapacity) {
  CountingAllocator::Install();
  const std::int64_t before = CountingAllocator::InUse();
  constexpr std::int64_t kFloats = 1 << 20;  // 4 MiB
  CountingAllocator::SetCapacity(before + 1024);
  {
    const CountingAllocator::HostMemory host;
    const torch::Tensor copy = torch::ones({kFloats});
    EXPECT_EQ(CountingAllocator::InUse(), before);
    EXPECT_EQ(copy.sum().item<double>(), kFloats);
  }
  EXPECT_EQ(CountingAllocator::InUse(), before) << "host memory freed subtracts nothing";
  EXPECT_THROW(torch::ones({kFloats}), c10::OutOfMemoryError) << "the device's own memory is held to its capacity";
  CountingAllocator::SetCapacity(0);
  const torch::Tensor counted = torch::ones({kFloats});
  EXPECT_EQ(CountingAllocator::InUse(), before + kFloats * 4);
}

}  // namespace
}  // namespace poplar::testing
