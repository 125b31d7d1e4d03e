// bf16 mixed precision (--precision bf16): bf16 compute and communication, fp32 master
// weights and Adam state. It trains (the loss falls) on every stage, multi-rank runs
// track the single-rank run within bf16 rounding, and saved weights are the fp32 masters;
// for GPT and for Llama.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <nlohmann/json.hpp>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

class MixedPrecision : public ::testing::TestWithParam<std::tuple<int, Architecture>> {};

std::vector<std::string> Args(const ScratchDir& scratch, const std::string& plan, int steps, const std::string& name) {
  return TrainCommand(scratch, plan, steps,
                      {"--precision", "bf16", "--lr", "3e-3", "--save", name + ".pt", "--metrics",
                       scratch.path() + "/" + name + ".jsonl", "--timeout", "60"});
}

TEST_P(MixedPrecision, TrainsAndTracksTheSingleRankRun) {
  const auto [stage, arch] = GetParam();
  ScratchDir scratch("poplar_bf16");
  if (arch == Architecture::kLlama) {
    WriteLlamaConfig(scratch);
  } else {
    WriteModelConfig(scratch);
  }
  WriteTokens(scratch, 20000);
  constexpr int kSteps = 20;
  const std::string one = WritePlan(scratch, "one.json", 0, {{14}});
  const auto plan = stage >= 2 ? WritePlan(scratch, "plan.json", stage, {{5, 3, 0}, {2, 2, 2}})
                               : WritePlan(scratch, "plan.json", stage, {{5, 3}, {4, 2}});
  const JobOutcome reference = RunJob(scratch, 1, Args(scratch, one, kSteps, "reference"));
  ASSERT_TRUE(reference.AllSucceeded()) << reference.Describe();
  const JobOutcome job = RunJob(scratch, 2, Args(scratch, plan, kSteps, "ranks"));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();

  const auto expected = ReadLines(scratch.path() + "/reference.jsonl");
  const auto actual = ReadLines(scratch.path() + "/ranks.jsonl");
  ASSERT_EQ(actual.size(), static_cast<std::size_t>(kSteps));
  const double first = nlohmann::json::parse(actual.front())["loss"];
  const double last = nlohmann::json::parse(actual.back())["loss"];
  const double last_reference = nlohmann::json::parse(expected.back())["loss"];
  std::cout << "[ bf16 " << ArchitectureName(arch) << " stage " << stage << " ] loss " << first << " -> " << last
            << " (one rank: " << last_reference << ")\n";
  EXPECT_LT(last, first - 1.0) << "bf16 training should learn";
  EXPECT_NEAR(last, last_reference, 0.05);

  // Saved weights are the fp32 masters, close to the single-rank run's.
  const StateDict ranks = ReadStateDict(scratch.path() + "/ranks.pt");
  EXPECT_EQ(ranks.begin()->second.scalar_type(), torch::kFloat32);
  const double difference = MaxAbsDifference(ReadStateDict(scratch.path() + "/reference.pt"), ranks);
  std::cout << "[ bf16 stage " << stage << " ] max |difference| = " << difference << "\n";
  EXPECT_LT(difference, 0.1);
}

INSTANTIATE_TEST_SUITE_P(Stages, MixedPrecision,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(Architecture::kGpt, Architecture::kLlama)),
                         [](const auto& info) {
                           return std::string(ArchitectureName(std::get<1>(info.param))) + "_stage" +
                                  std::to_string(std::get<0>(info.param));
                         });

// Uneven state shares in bf16: the slices move as bf16 bits and are summed in fp32 as the
// even split's are; only the gradient norm's partial sums fall differently, and fp32
// masters a rounding apart may round to different bf16 parameters. So the run tracks the
// even split within bf16's noise (the one-rank comparison above allows 0.1).
TEST(MixedPrecision, UnevenStateSharesTrackTheEvenSplit) {
  ScratchDir scratch("poplar_bf16_shares");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 20000);
  constexpr int kSteps = 5;
  for (const int stage : {1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::vector<std::vector<int>> ranks = stage >= 2 ? std::vector<std::vector<int>>{{5, 3, 0}, {2, 2, 2}}
                                                           : std::vector<std::vector<int>>{{5, 3}, {4, 2}};
    const JobOutcome even =
        RunJob(scratch, 2, Args(scratch, WritePlan(scratch, "even.json", stage, ranks), kSteps, "even"));
    ASSERT_TRUE(even.AllSucceeded()) << even.Describe();
    const JobOutcome uneven =
        RunJob(scratch, 2, Args(scratch, WritePlan(scratch, "uneven.json", stage, ranks, {5, 1}), kSteps, "uneven"));
    ASSERT_TRUE(uneven.AllSucceeded()) << uneven.Describe();
    const double difference =
        MaxAbsDifference(ReadStateDict(scratch.path() + "/even.pt"), ReadStateDict(scratch.path() + "/uneven.pt"));
    std::cout << "[ bf16 stage " << stage << ", shares 5:1 against even ] max |difference| = " << difference << "\n";
    EXPECT_LT(difference, 0.02);
    const auto expected = ReadLines(scratch.path() + "/even.jsonl");
    const auto actual = ReadLines(scratch.path() + "/uneven.jsonl");
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
      EXPECT_NEAR(nlohmann::json::parse(actual[i])["loss"].get<double>(),
                  nlohmann::json::parse(expected[i])["loss"].get<double>(), 0.01)
          << "step " << i + 1;
    }
  }
}

// fp16 with its dynamic loss scale trains and tracks the one-rank run where fp16
// arithmetic runs (libtorch 2: scripts/check-libtorch2; a GPU); Debian's libtorch 1.13 has
// no fp16 matrix product on the CPU, and there the worker refuses it at once, naming the
// flag, instead of failing inside the first micro-batch.
TEST(Fp16, TrainsWhereFp16ArithmeticRunsAndIsRefusedClearlyWhereNot) {
  ScratchDir scratch("poplar_fp16");
  WriteLlamaConfig(scratch);
  WriteTokens(scratch, 20000);
  const auto args = [&](const std::string& plan, const std::string& name) {
    return TrainCommand(scratch, plan, 20,
                        {"--precision", "fp16", "--lr", "3e-3", "--metrics", scratch.path() + "/" + name + ".jsonl",
                         "--timeout", "60"});
  };
  const std::string plan = WritePlan(scratch, "plan.json", 2, {{5, 3, 0}, {2, 2, 2}});
  const JobOutcome job = RunJob(scratch, 2, args(plan, "ranks"));
#if TORCH_VERSION_MAJOR >= 2
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const JobOutcome one = RunJob(scratch, 1, args(WritePlan(scratch, "one.json", 0, {{14}}), "one"));
  ASSERT_TRUE(one.AllSucceeded()) << one.Describe();
  const auto lines = ReadLines(scratch.path() + "/ranks.jsonl");
  ASSERT_EQ(lines.size(), 20u);
  const auto first = nlohmann::json::parse(lines.front()), last = nlohmann::json::parse(lines.back());
  EXPECT_LT(last["loss"].get<double>(), first["loss"].get<double>() - 1.0) << "fp16 training should learn";
  EXPECT_GT(last["loss_scale"].get<double>(), 0);
  const double alone = nlohmann::json::parse(ReadLines(scratch.path() + "/one.jsonl").back())["loss"];
  EXPECT_NEAR(last["loss"].get<double>(), alone, 0.05);
#else
  EXPECT_FALSE(job.AllSucceeded());
  EXPECT_NE(job.errors[0].find("--precision: fp16 on the CPU needs libtorch 2"), std::string::npos) << job.errors[0];
#endif
}

}  // namespace
}  // namespace poplar::testing
