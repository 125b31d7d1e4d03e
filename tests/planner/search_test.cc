#include "planner/search/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "exhaustive_solver.h"
#include "planner/search/baselines.h"
#include "planner/search/simulator.h"
#include "test_problems.h"

namespace poplar {
namespace {

using testing::MakeClass;
using testing::MakeProblem;
using testing::RandomProblem;
using testing::RandomProblemOptions;

std::string Describe(const StageProblem& problem) {
  std::string text = "stage " + std::to_string(problem.stage) + ", batch " + std::to_string(problem.global_batch) +
                     ", comm/round " + std::to_string(problem.comm_per_round_s) + "; classes:";
  for (const auto& c : problem.classes) {
    text += " [" + c.type + " x" + std::to_string(c.count) + " cap " + std::to_string(c.max_micro_batch) + " times";
    for (int b = 1; b <= c.max_micro_batch; ++b) text += " " + std::to_string(c.Time(b));
    text += "]";
  }
  return text;
}

std::string DescribeSchedule(const Schedule& schedule) {
  std::string text;
  for (const auto& a : schedule.assignments) {
    text += " {class " + std::to_string(a.device_class) + " x" + std::to_string(a.count) + ":";
    for (int b : a.micro_batches) text += " " + std::to_string(b);
    text += "}";
  }
  return text;
}

// The property that matters most: on many random small clusters, for every stage, the
// search's schedule is valid and exactly as fast as the best any enumeration finds.
TEST(Search, MatchesExhaustiveSolverOnRandomSmallClusters) {
  std::mt19937 rng(20261121);
  // The random problems must reach the cases where bugs hide: several rounds, several
  // micro-batches on one device, and classes that hold no sample.
  int multi_round = 0, accumulating = 0, idle_class = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const StageProblem problem = RandomProblem(rng, RandomProblemOptions{});
    const auto schedule = SearchSchedule(problem);
    ASSERT_TRUE(schedule.has_value()) << Describe(problem);
    ASSERT_EQ(ValidateSchedule(problem, *schedule), "") << Describe(problem);
    const double searched = Simulate(problem, *schedule).step_s;
    const testing::ReferenceOptimum reference = testing::SolveExhaustively(problem);
    ASSERT_EQ(ValidateSchedule(problem, reference.schedule), "");
    ASSERT_NEAR(searched, reference.step_s, 1e-9) << Describe(problem) << "\nsearch:" << DescribeSchedule(*schedule)
                                                  << "\nreference:" << DescribeSchedule(reference.schedule);
    const bool rounds = problem.RoundsSynchronised() && schedule->Rounds() > 1;
    multi_round += rounds ? 1 : 0;
    accumulating += !problem.RoundsSynchronised() && schedule->Rounds() > 1 ? 1 : 0;
    for (const auto& c : problem.classes) idle_class += c.max_micro_batch == 0 ? 1 : 0;
  }
  std::cout << "[ coverage ] " << multi_round << " multi-round, " << accumulating << " accumulating, " << idle_class
            << " idle classes of 2000 problems\n";
  EXPECT_GT(multi_round, 200);
  EXPECT_GT(accumulating, 200);
  EXPECT_GT(idle_class, 50);
}

// Stages 2-3 with many rounds (batches up to 300 on devices holding at most 4): the
// round-kind pruning and the covering knapsack still give the exact optimum.
TEST(Search, MatchesExhaustiveSolverWithManyRounds) {
  std::mt19937 rng(99);
  RandomProblemOptions options;
  options.max_batch = 300;
  for (int trial = 0; trial < 300; ++trial) {
    options.stage = 2 + trial % 2;
    const StageProblem problem = RandomProblem(rng, options);
    const auto schedule = SearchSchedule(problem);
    ASSERT_TRUE(schedule.has_value());
    ASSERT_EQ(ValidateSchedule(problem, *schedule), "") << Describe(problem);
    const testing::ReferenceOptimum reference = testing::SolveExhaustively(problem);
    ASSERT_NEAR(Simulate(problem, *schedule).step_s, reference.step_s, 1e-9) << Describe(problem);
  }
}

// Larger random clusters: the schedule is valid (samples sum to the global batch, every
// micro-batch within its cap, equal rounds for stages 2-3) and never slower than either
// baseline under the same simulator.
TEST(Search, ValidAndNoSlowerThanBaselinesOnLargerClusters) {
  std::mt19937 rng(7);
  RandomProblemOptions options;
  options.max_classes = 6;
  options.max_count = 300;
  options.max_cap = 24;
  options.max_batch = 3000;
  for (int trial = 0; trial < 300; ++trial) {
    const StageProblem problem = RandomProblem(rng, options);
    const auto schedule = SearchSchedule(problem);
    ASSERT_TRUE(schedule.has_value());
    ASSERT_EQ(ValidateSchedule(problem, *schedule), "") << Describe(problem);
    const double searched = Simulate(problem, *schedule).step_s;
    for (const auto& baseline : {UniformSchedule(problem), ProportionalSchedule(problem)}) {
      if (!baseline) continue;
      ASSERT_EQ(ValidateSchedule(problem, *baseline), "") << Describe(problem);
      EXPECT_LE(searched, Simulate(problem, *baseline).step_s + 1e-9) << Describe(problem);
    }
    // Identical devices share lists: at most rounds + 1 groups per class (stages 2-3),
    // two sample counts per class (stages 0-1).
    std::vector<int> groups(problem.classes.size(), 0);
    for (const auto& assignment : schedule->assignments) ++groups[assignment.device_class];
    for (int count : groups) EXPECT_LE(count, schedule->Rounds() + 1);
  }
}

TEST(Search, GivesTheFasterDeviceMoreSamples) {
  // Same memory, one device twice as fast per sample.
  const StageProblem problem = MakeProblem(
      0, 30, {MakeClass("fast", 1, 8, {{1, 1.0}, {8, 8.0}}), MakeClass("slow", 1, 8, {{1, 2.0}, {8, 16.0}})});
  const auto schedule = SearchSchedule(problem);
  ASSERT_TRUE(schedule);
  std::int64_t fast = 0, slow = 0;
  for (const auto& a : schedule->assignments) (a.device_class == 0 ? fast : slow) += a.Samples();
  EXPECT_EQ(fast, 20);
  EXPECT_EQ(slow, 10);
  EXPECT_DOUBLE_EQ(Simulate(problem, *schedule).compute_s, 20.0);
}

// Stages 0-1 split a device's samples by a sliding-window minimum per linear segment of
// its curve: on a curve with kinks both ways and a cap of hundreds, its split costs
// what the plain O(samples x cap) dynamic programme finds.
TEST(Search, SplitsSamplesAsCheaplyAsThePlainDynamicProgramme) {
  const DeviceClass device =
      MakeClass("gpu", 1, 400, {{1, 1.0}, {7, 1.3}, {50, 6.0}, {64, 6.2}, {200, 30.0}, {333, 33.0}, {400, 50.0}});
  for (const std::int64_t batch : {1, 6, 64, 399, 997, 2500}) {
    std::vector<double> best(batch + 1, 0.0);
    for (std::int64_t s = 1; s <= batch; ++s) {
      best[s] = std::numeric_limits<double>::infinity();
      for (int b = 1; b <= std::min<std::int64_t>(s, 400); ++b)
        best[s] = std::min(best[s], device.Time(b) + best[s - b]);
    }
    const StageProblem problem = MakeProblem(0, batch, {device});
    const auto schedule = SearchSchedule(problem);
    ASSERT_TRUE(schedule);
    EXPECT_NEAR(Simulate(problem, *schedule).compute_s, best[batch], 1e-9 * best[batch]) << "batch " << batch;
  }
}

TEST(Search, UsesLargeMicroBatchesWhenEachCarriesOverhead) {
  // 1 s overhead per micro-batch plus 0.1 s per sample: four micro-batches of 8 beat
  // anything with more micro-batches.
  const StageProblem problem = MakeProblem(1, 32, {MakeClass("gpu", 1, 8, {{1, 1.1}, {8, 1.8}})});
  const auto schedule = SearchSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(schedule->assignments.size(), 1u);
  EXPECT_EQ(schedule->assignments[0].micro_batches, (std::vector<int>{8, 8, 8, 8}));
}

TEST(Search, StageTwoBalancesEachRoundAndPadsWithZeros) {
  // The big device holds 6 per round, the small one 2. With 5 s of communication per
  // round, two full rounds (2 x (6 + 5) s) beat more, smaller rounds (4 x (2 + 5) s).
  const StageProblem problem = MakeProblem(
      2, 16, {MakeClass("big", 1, 6, {{1, 1.0}, {6, 6.0}}), MakeClass("small", 1, 2, {{1, 1.0}, {2, 2.0}})}, 0.0, 5.0);
  const auto schedule = SearchSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
  EXPECT_EQ(schedule->Rounds(), 2);
  EXPECT_DOUBLE_EQ(Simulate(problem, *schedule).step_s, 2 * (6.0 + 5.0));
}

TEST(Search, DeviceThatHoldsNoSampleJoinsWithEmptyLists) {
  StageProblem problem =
      MakeProblem(3, 5, {MakeClass("gpu", 2, 4, {{1, 1.0}, {4, 2.0}}), MakeClass("tiny", 3, 0, {{1, 1.0}})}, 0.0, 0.1);
  const auto schedule = SearchSchedule(problem);
  ASSERT_TRUE(schedule);
  ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
  for (const auto& a : schedule->assignments) {
    if (a.device_class == 1) {
      EXPECT_EQ(a.Samples(), 0);
    }
  }
}

TEST(Search, ReturnsNothingForAnInfeasibleProblem) {
  StageProblem problem = MakeProblem(0, 4, {MakeClass("gpu", 1, 4, {{1, 1.0}})});
  problem.feasible = false;
  EXPECT_FALSE(SearchSchedule(problem).has_value());
}

TEST(Search, ScheduleSizeDoesNotGrowWithIdenticalDevices) {
  for (int count : {1, 10, 1000, 100000}) {
    const StageProblem problem =
        MakeProblem(2, 7LL * count + 3,
                    {MakeClass("a", count, 4, {{1, 1.0}, {4, 3.0}}), MakeClass("b", count, 2, {{1, 1.5}})}, 0.0, 0.2);
    const auto schedule = SearchSchedule(problem);
    ASSERT_TRUE(schedule);
    ASSERT_EQ(ValidateSchedule(problem, *schedule), "");
    EXPECT_LE(schedule->assignments.size(), 2u * (schedule->Rounds() + 1));
  }
}

}  // namespace
}  // namespace poplar
