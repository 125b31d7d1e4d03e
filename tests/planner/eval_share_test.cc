// How the ranks divide an evaluation (planner/formats/eval_share.h).
#include "planner/formats/eval_share.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

WorkerPlan Plan(int stage, std::vector<std::vector<int>> micro_batches) {
  WorkerPlan plan;
  plan.stage = stage;
  plan.micro_batches = std::move(micro_batches);
  for (const auto& sizes : plan.micro_batches) {
    for (int size : sizes) plan.global_batch += size;
  }
  return plan;
}

// Every sample once, in rank order, in proportion to each rank's share of the batch;
// every rank makes as many rounds as the busiest.
TEST(EvalShare, CoversEverySampleOnceInProportionToTheBatch) {
  const WorkerPlan plan = Plan(2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}});  // 7, 4, 3 of 14
  for (std::int64_t samples : {1, 2, 13, 14, 41, 1000, 999'999'937}) {
    SCOPED_TRACE(samples);
    std::int64_t next = 0;
    std::int64_t rounds = -1;
    for (int rank = 0; rank < 3; ++rank) {
      const EvalShare share = EvalShareOf(plan, rank, samples);
      EXPECT_EQ(share.first, next);
      next += share.count;
      if (rounds < 0) rounds = share.rounds;
      EXPECT_EQ(share.rounds, rounds);
      if (share.count > 0) {
        EXPECT_LE(share.count, share.rounds * share.micro_batch);
      }
    }
    EXPECT_EQ(next, samples);
  }
  const EvalShare first = EvalShareOf(plan, 0, 1400);
  EXPECT_EQ(first.count, 700);
  EXPECT_EQ(first.micro_batch, 4);
}

TEST(EvalShare, TheRoundsAreTheBusiestRanks) {
  const WorkerPlan plan = Plan(2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}});
  EXPECT_EQ(EvalShareOf(plan, 0, 1400).rounds, 300);  // rank 2: 300 samples, 1 at a time
  EXPECT_EQ(EvalShareOf(plan, 2, 1400).count, 300);
  EXPECT_EQ(EvalShareOf(plan, 2, 1400).micro_batch, 1);
}

// A rank without samples in the plan evaluates none, but joins every round.
TEST(EvalShare, ARankWithNoSamplesEvaluatesNoneAndJoinsEveryRound) {
  const WorkerPlan plan = Plan(3, {{5, 5, 4}, {0, 0, 0}});
  const EvalShare idle = EvalShareOf(plan, 1, 41);
  EXPECT_EQ(idle.count, 0);
  EXPECT_EQ(idle.micro_batch, 0);
  EXPECT_EQ(idle.rounds, 9);  // rank 0: 41 samples, 5 at a time
  EXPECT_EQ(EvalShareOf(plan, 0, 41).count, 41);
}

}  // namespace
}  // namespace poplar
