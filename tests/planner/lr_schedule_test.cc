// The learning-rate schedule's formula (planner/lr_schedule.h) and its checks.
#include "planner/lr_schedule.h"

#include <cmath>

#include <gtest/gtest.h>

namespace poplar {
namespace {

TEST(LrSchedule, ConstantIsThePeakRateAfterAnyWarmUp) {
  EXPECT_EQ(LearningRateAt(LrSchedule{}, 6e-4, 1), 6e-4);
  EXPECT_EQ(LearningRateAt(LrSchedule{}, 6e-4, 1'000'000), 6e-4);
  const LrSchedule warm{4, LrDecay::kConstant, 0, 0};
  EXPECT_DOUBLE_EQ(LearningRateAt(warm, 1e-3, 1), 2.5e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(warm, 1e-3, 3), 7.5e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(warm, 1e-3, 4), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(warm, 1e-3, 5), 1e-3);
}

// After W warm-up steps the decay starts from the peak (t = 0 at step W + 1), reaches
// min_lr at step D + 1 and stays there: the cosine does not rise again past T.
TEST(LrSchedule, DecaysFromThePeakToTheFloorOverDecayStepsLessWarmUp) {
  const LrSchedule cosine{2, LrDecay::kCosine, 6, 1e-4};  // T = 4
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, 1e-3, 2), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, 1e-3, 3), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, 1e-3, 4), 1e-4 + 9e-4 * (1 + std::cos(M_PI / 4)) / 2);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, 1e-3, 5), 1e-4 + 9e-4 * 0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, 1e-3, 7), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, 1e-3, 100), 1e-4);

  const LrSchedule linear{0, LrDecay::kLinear, 4, 0};
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, 1e-3, 1), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, 1e-3, 2), 7.5e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, 1e-3, 4), 2.5e-4);
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, 1e-3, 5), 0);
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, 1e-3, 9), 0);
}

TEST(LrSchedule, NamesTheSettingThatLeavesNoDecayOrIsOutOfRange) {
  std::string key;
  EXPECT_EQ(LrScheduleProblem(LrSchedule{}, 1e-3, &key), "");
  EXPECT_EQ(LrScheduleProblem(LrSchedule{3, LrDecay::kCosine, 4, 1e-4}, 1e-3, &key), "");
  EXPECT_EQ(LrScheduleProblem(LrSchedule{3, LrDecay::kCosine, 3, 1e-4}, 1e-3, &key),
            "is 3, not more than the 3 warm-up steps: no step is left to decay over");
  EXPECT_EQ(key, "decay_steps");
  EXPECT_EQ(LrScheduleProblem(LrSchedule{0, LrDecay::kLinear, 4, 2e-3}, 1e-3, &key),
            "must be from 0 to the peak learning rate (0.001), got 0.002");
  EXPECT_EQ(key, "min_lr");
  EXPECT_NE(LrScheduleProblem(LrSchedule{-1, LrDecay::kConstant, 0, 0}, 1e-3, &key), "");
  EXPECT_EQ(key, "warmup_steps");
  EXPECT_EQ(LrDecayNamed("cosine"), LrDecay::kCosine);
  EXPECT_EQ(LrDecayNamed("Cosine"), std::nullopt);
  EXPECT_STREQ(LrDecayName(LrDecay::kLinear), "linear");
}

}  // namespace
}  // namespace poplar
