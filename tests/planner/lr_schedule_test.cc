// The learning-rate schedule's formula (planner/formats/lr_schedule.h) and its checks.
#include "planner/formats/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "planner/base/input_error.h"

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

// The settings as the caller spells them; "steps" for what set the job's last step.
const LrScheduleNames kNames = {"warmup_steps", "decay_steps", "min_lr", "steps", "add lr_decay"};

// The refusal of `settings` (peak 1e-3, 10 steps) as (setting, reason); empty if none.
std::pair<std::string, std::string> Refusal(const LrScheduleSettings& settings) {
  try {
    ResolveLrSchedule(settings, 1e-3, 10, kNames);
  } catch (const InputError& error) {
    return {error.file(), error.reason()};
  }
  return {"", ""};
}

TEST(LrSchedule, ResolvesTheDefaultsAsTheWorkerDoes) {
  const LrSchedule schedule = ResolveLrSchedule({2, LrDecay::kCosine, std::nullopt, std::nullopt}, 1e-3, 10, kNames);
  EXPECT_EQ(schedule.decay_steps, 10);  // the job's last step
  EXPECT_DOUBLE_EQ(schedule.min_lr, 1e-4);
}

TEST(LrSchedule, NamesTheSettingThatLeavesNoDecayOrIsOutOfRange) {
  EXPECT_EQ(Refusal({}).second, "");
  EXPECT_EQ(Refusal({3, LrDecay::kCosine, 4, 1e-4}).second, "");
  EXPECT_EQ(Refusal({3, LrDecay::kCosine, 3, 1e-4}).second,
            "is 3, not more than the 3 warm-up steps: no step is left to decay over");
  EXPECT_EQ(Refusal({3, LrDecay::kCosine, 3, 1e-4}).first, "decay_steps");
  EXPECT_EQ(Refusal({10, LrDecay::kCosine, std::nullopt, 1e-4}).first, "steps");  // decay_steps defaulted to it
  EXPECT_EQ(Refusal({0, LrDecay::kLinear, 4, 2e-3}).second,
            "must be from 0 to the peak learning rate (0.001), got 0.002");
  EXPECT_EQ(Refusal({0, LrDecay::kLinear, 4, 2e-3}).first, "min_lr");
  EXPECT_NE(Refusal({-1, LrDecay::kConstant, std::nullopt, std::nullopt}).second, "");
  EXPECT_EQ(Refusal({-1, LrDecay::kConstant, std::nullopt, std::nullopt}).first, "warmup_steps");
  EXPECT_EQ(Refusal({0, LrDecay::kConstant, std::nullopt, 1e-5}),
            std::make_pair(std::string("min_lr"), std::string("is for a decay: add lr_decay")));
  EXPECT_EQ(LrDecayNamed("cosine"), LrDecay::kCosine);
  EXPECT_EQ(LrDecayNamed("Cosine"), std::nullopt);
  EXPECT_STREQ(LrDecayName(LrDecay::kLinear), "linear");
}

}  // namespace
}  // namespace poplar
