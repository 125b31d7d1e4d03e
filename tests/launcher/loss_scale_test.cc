// Dynamic loss scaling (launcher/zero/loss_scaler.h), PyTorch GradScaler's semantics: the
// scaler's back-off and growth, and in the worker, an overflow on one rank skipping the
// step on every rank (injected: POPLAR_TEST_OVERFLOW, as an fp16 overflow would; fp16
// arithmetic itself needs libtorch 2 or a GPU), at every stage.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "launcher/zero/loss_scaler.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheIntervalOfCleanSteps) {
  LossScaler scaler({/*init_scale=*/1024, /*growth_factor=*/2, /*backoff_factor=*/0.5, /*growth_interval=*/3});
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_TRUE(scaler.Update(false));  // skipped, halved, the clean run starts again
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_FALSE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_FALSE(scaler.Update(true));  // the third clean step in a row doubles it
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(LossScaler, StartsAtGradScalersDefaults) {
  const LossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536);
  EXPECT_EQ(LossScalerOptions().growth_interval, 2000);
}

// Sets POPLAR_TEST_OVERFLOW for the workers this test starts.
class InjectedOverflow {
 public:
  explicit InjectedOverflow(const std::string& step_rank) { ::setenv("POPLAR_TEST_OVERFLOW", step_rank.c_str(), 1); }
  ~InjectedOverflow() { ::unsetenv("POPLAR_TEST_OVERFLOW"); }
  InjectedOverflow(const InjectedOverflow&) = delete;
  InjectedOverflow& operator=(const InjectedOverflow&) = delete;
};

class LossScaling : public ::testing::TestWithParam<int> {
 protected:
  LossScaling() {
    WriteModelConfig(scratch);
    WriteTokens(scratch, 6000);
  }

  std::string Plan() const {
    const int stage = GetParam();
    return stage >= 2 ? WritePlan(scratch, "plan.json", stage, {{5, 3, 0}, {2, 2, 2}})
                      : WritePlan(scratch, "plan.json", stage, {{5, 3}, {4, 2}});
  }

  // 2 ranks, fp32, a dynamic loss scale from 2^16 that grows after 2 clean steps.
  std::vector<std::string> Args(int steps, const std::string& name, const std::string& loss_scale) const {
    return TrainCommand(
        scratch, Plan(), steps,
        {"--loss-scale", loss_scale, "--loss-scale-growth-interval", "2", "--save", name + ".pt", "--metrics",
         scratch.path() + "/" + name + "-{rank}.jsonl", "--lr", "1e-3", "--timeout", "60"});
  }

  ScratchDir scratch{"poplar_loss_scale"};
};

TEST_P(LossScaling, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  {
    const InjectedOverflow overflow("3:1");  // rank 1's gradients of step 3
    const JobOutcome job = RunJob(scratch, 2, Args(5, "overflow", "dynamic"));
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  }
  // Every rank: step 3 skipped; the scale grows after steps 2 and 5, halves at 3.
  const std::vector<double> scales = {65536, 65536, 131072, 65536, 65536};
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = ReadLines(scratch.path() + "/overflow-" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(lines.size(), 5u);
    for (int step = 0; step < 5; ++step) {
      const auto record = nlohmann::json::parse(lines[step]);
      EXPECT_EQ(record["skipped"].get<bool>(), step == 2) << "rank " << rank << " step " << step + 1;
      EXPECT_EQ(record["loss_scale"].get<double>(), scales[step]) << "rank " << rank << " step " << step + 1;
    }
  }
  // A skipped step changes nothing: three steps with the third skipped are two steps.
  {
    const InjectedOverflow overflow("3:1");
    const JobOutcome job = RunJob(scratch, 2, Args(3, "skipped", "dynamic"));
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  }
  const JobOutcome two = RunJob(scratch, 2, Args(2, "two", "dynamic"));
  ASSERT_TRUE(two.AllSucceeded()) << two.Describe();
  EXPECT_EQ(MaxAbsDifference(ReadStateDict(scratch.path() + "/skipped.pt"), ReadStateDict(scratch.path() + "/two.pt")),
            0.0);
}

// The scale is divided out before clipping: scaled training is unscaled training, to
// rounding (an unscale after clipping would clip a gradient 2^16 times too large, and
// move parameters by far less than an update).
TEST_P(LossScaling, ScaledTrainingEqualsUnscaledTraining) {
  const JobOutcome scaled = RunJob(scratch, 2, Args(3, "scaled", "dynamic"));
  ASSERT_TRUE(scaled.AllSucceeded()) << scaled.Describe();
  const JobOutcome plain = RunJob(scratch, 2, Args(3, "plain", "off"));
  ASSERT_TRUE(plain.AllSucceeded()) << plain.Describe();
  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/scaled.pt"), ReadStateDict(scratch.path() + "/plain.pt"));
  std::cout << "[ stage " << GetParam() << " ] scaled against unscaled: max |difference| = " << difference << "\n";
  // The equivalence tests' bound: 3 steps move parameters ~3e-3; rounding of the scale's
  // multiplication and division stays ~1e-6 (libtorch 1.13: 5e-7, 2.6: 1.8e-6).
  EXPECT_LT(difference, 1e-5);
}

// A checkpoint keeps the scale, its clean steps and the updates taken: a resume after a
// skipped step goes on as the uninterrupted run (Adam's step count is the updates').
TEST_P(LossScaling, AResumeGoesOnWithTheScaleAndTheUpdatesTaken) {
  const InjectedOverflow overflow("2:0");
  const JobOutcome whole = RunJob(scratch, 2, Args(5, "whole", "dynamic"));
  ASSERT_TRUE(whole.AllSucceeded()) << whole.Describe();
  const std::string checkpoints = scratch.path() + "/checkpoints";
  auto first_args = Args(3, "first", "dynamic");
  first_args.insert(first_args.end(), {"--checkpoint-dir", checkpoints});
  const JobOutcome first = RunJob(scratch, 2, first_args);
  ASSERT_TRUE(first.AllSucceeded()) << first.Describe();
  auto second_args = Args(5, "resumed", "dynamic");
  second_args.insert(second_args.end(), {"--resume", checkpoints});
  const JobOutcome second = RunJob(scratch, 2, second_args);
  ASSERT_TRUE(second.AllSucceeded()) << second.Describe();
  EXPECT_LT(
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt")),
      1e-7);
  const auto whole_lines = ReadLines(scratch.path() + "/whole-0.jsonl");
  const auto resumed_lines = ReadLines(scratch.path() + "/resumed-0.jsonl");
  ASSERT_EQ(whole_lines.size(), 5u);
  ASSERT_EQ(resumed_lines.size(), 2u);  // steps 4 and 5
  for (int step = 3; step < 5; ++step) {
    EXPECT_EQ(nlohmann::json::parse(resumed_lines[step - 3])["loss_scale"],
              nlohmann::json::parse(whole_lines[step])["loss_scale"])
        << "step " << step + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LossScaling, ::testing::Values(0, 1, 2, 3));

// Without a loss scaler an overflow is divergence: the run stops and says so.
TEST(LossScalingOff, AnOverflowStopsTheRun) {
  ScratchDir scratch("poplar_no_loss_scale");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  const InjectedOverflow overflow("2:0");
  const JobOutcome job =
      RunJob(scratch, 2, TrainCommand(scratch, WritePlan(scratch, "plan.json", 1, {{4}, {4}}), 3, {"--timeout", "60"}));
  EXPECT_FALSE(job.AllSucceeded());
  EXPECT_NE(job.errors[0].find("diverged at step 2"), std::string::npos) << job.errors[0];
}

}  // namespace
}  // namespace poplar::testing
