#include "planner/search/simulator.h"

#include <gtest/gtest.h>

#include "test_problems.h"

namespace poplar {
namespace {

using testing::MakeClass;
using testing::MakeProblem;

// Two classes with t(b) = b (fast) and t(b) = 2b (slow); optimizer 0.5 s and 0.25 s.
std::vector<DeviceClass> TwoClasses() {
  return {MakeClass("fast", 2, 8, {{1, 1.0}, {8, 8.0}}, 0.5), MakeClass("slow", 1, 8, {{1, 2.0}, {8, 16.0}}, 0.25)};
}

TEST(Simulator, StageOneWaitsForTheSlowestAccumulation) {
  const StageProblem problem = MakeProblem(1, 14, TwoClasses(), 0.75);
  Schedule schedule{1, {{0, 1, {4, 2}}, {0, 1, {3}}, {1, 1, {5}}}};
  ASSERT_EQ(ValidateSchedule(problem, schedule), "");
  const StepPrediction p = Simulate(problem, schedule);
  EXPECT_DOUBLE_EQ(p.compute_s, 10.0);  // slow device: 5 samples x 2 s
  EXPECT_DOUBLE_EQ(p.communication_s, 0.75);
  EXPECT_DOUBLE_EQ(p.optimizer_s, 0.5);  // slowest optimizer
  EXPECT_DOUBLE_EQ(p.step_s, 11.25);
  EXPECT_DOUBLE_EQ(p.samples_per_s, 14 / 11.25);
  // fast devices: busy 6 and 3, mean 4.5; idle 4 and 7, mean 5.5.
  EXPECT_DOUBLE_EQ(p.classes[0].busy_s, 4.5);
  EXPECT_DOUBLE_EQ(p.classes[0].idle_s, 5.5);
  EXPECT_DOUBLE_EQ(p.classes[1].idle_s, 0.0);
}

TEST(Simulator, StageThreeSumsTheSlowestDeviceOfEveryRound) {
  const StageProblem problem = MakeProblem(3, 13, TwoClasses(), 0.0, 1.0);
  Schedule schedule{3, {{0, 2, {4, 1}}, {1, 1, {1, 2}}}};
  ASSERT_EQ(ValidateSchedule(problem, schedule), "");
  const StepPrediction p = Simulate(problem, schedule);
  // round 1: max(4, 2) = 4; round 2: max(1, 4) = 4; plus 2 rounds x 1 s.
  EXPECT_DOUBLE_EQ(p.compute_s, 8.0);
  EXPECT_DOUBLE_EQ(p.communication_s, 2.0);
  EXPECT_DOUBLE_EQ(p.step_s, 10.5);
}

TEST(Simulator, ZeroEntryMeansNoComputeInThatRound) {
  const StageProblem problem = MakeProblem(2, 8, TwoClasses(), 0.0, 0.0);
  Schedule schedule{2, {{0, 2, {4, 0}}, {1, 1, {0, 0}}}};
  ASSERT_EQ(ValidateSchedule(problem, schedule), "");
  EXPECT_DOUBLE_EQ(Simulate(problem, schedule).compute_s, 4.0);
}

TEST(ValidateSchedule, RejectsWrongSums) {
  const StageProblem problem = MakeProblem(0, 10, TwoClasses());
  Schedule schedule{0, {{0, 2, {4}}, {1, 1, {1}}}};
  EXPECT_NE(ValidateSchedule(problem, schedule).find("9 samples"), std::string::npos);
}

TEST(ValidateSchedule, RejectsMicroBatchOverCap) {
  const StageProblem problem = MakeProblem(0, 11, TwoClasses());
  Schedule schedule{0, {{0, 2, {1}}, {1, 1, {9}}}};
  EXPECT_NE(ValidateSchedule(problem, schedule).find("allowed 1..8"), std::string::npos);
}

TEST(ValidateSchedule, RejectsZeroEntryAtStageZero) {
  const StageProblem problem = MakeProblem(0, 8, TwoClasses());
  Schedule schedule{0, {{0, 2, {4, 0}}, {1, 1, {}}}};
  EXPECT_NE(ValidateSchedule(problem, schedule), "");
}

TEST(ValidateSchedule, RejectsUnequalRoundsAtStageTwo) {
  const StageProblem problem = MakeProblem(2, 8, TwoClasses());
  Schedule schedule{2, {{0, 2, {2, 1}}, {1, 1, {2}}}};
  EXPECT_NE(ValidateSchedule(problem, schedule).find("same number of rounds"), std::string::npos);
}

TEST(ValidateSchedule, RejectsMissingDevices) {
  const StageProblem problem = MakeProblem(0, 8, TwoClasses());
  Schedule schedule{0, {{0, 1, {4}}, {1, 1, {4}}}};
  EXPECT_NE(ValidateSchedule(problem, schedule).find("1 of 2"), std::string::npos);
}

}  // namespace
}  // namespace poplar
