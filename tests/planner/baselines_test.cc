#include "planner/search/baselines.h"

#include <gtest/gtest.h>

#include "test_problems.h"

namespace poplar {
namespace {

using testing::MakeClass;
using testing::MakeProblem;

TEST(UniformBaseline, OneMicroBatchSizeSetByTheSmallestMemory) {
  // caps 8 and 2: micro-batch 2 everywhere, 4 devices, 24 samples -> 3 accumulation steps.
  const StageProblem problem =
      MakeProblem(0, 24, {MakeClass("big", 2, 8, {{1, 1.0}}), MakeClass("small", 2, 2, {{1, 1.0}})});
  const auto schedule = UniformSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
  for (const auto& a : schedule->assignments) EXPECT_EQ(a.micro_batches, (std::vector<int>{2, 2, 2}));
}

TEST(UniformBaseline, SpreadsAnUnevenBatchOverDevicesAndKeepsRoundsEqual) {
  const StageProblem problem =
      MakeProblem(2, 11, {MakeClass("big", 2, 8, {{1, 1.0}}), MakeClass("small", 2, 2, {{1, 1.0}})});
  const auto schedule = UniformSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
  EXPECT_EQ(schedule->Rounds(), 2);
}

TEST(UniformBaseline, InfeasibleWhenSomeDeviceHoldsNoSample) {
  const StageProblem problem =
      MakeProblem(0, 8, {MakeClass("big", 2, 8, {{1, 1.0}}), MakeClass("none", 1, 0, {{1, 1.0}})});
  EXPECT_FALSE(UniformSchedule(problem).has_value());
}

TEST(ProportionalBaseline, SharesFollowSpeedAtTheLargestMicroBatch) {
  // fast: 8 samples in 4 s (2/s); slow: 4 samples in 4 s (1/s). 30 samples: 20 and 10.
  const StageProblem problem =
      MakeProblem(1, 30, {MakeClass("fast", 1, 8, {{8, 4.0}}), MakeClass("slow", 1, 4, {{4, 4.0}})});
  const auto schedule = ProportionalSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
  EXPECT_EQ(schedule->assignments[0].Samples(), 20);
  EXPECT_EQ(schedule->assignments[0].micro_batches, (std::vector<int>{7, 7, 6}));
  EXPECT_EQ(schedule->assignments[1].Samples(), 10);
}

TEST(ProportionalBaseline, StageThreeUsesTheRoundsOfTheBusiestDevice) {
  const StageProblem problem =
      MakeProblem(3, 30, {MakeClass("fast", 1, 8, {{8, 4.0}}), MakeClass("slow", 1, 4, {{4, 4.0}})});
  const auto schedule = ProportionalSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
  EXPECT_EQ(schedule->Rounds(), 3);  // 20 samples at most 8 per round
}

}  // namespace
}  // namespace poplar
