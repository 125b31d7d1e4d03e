#include "planner/cost_model.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

const LinkSpec kLink{1e9, 1e-5};  // 1 GB/s, 10 us per hop

TEST(RingCollectives, FollowTheRingFormulas) {
  // 4 ranks, 1 GB: reduce-scatter moves 3/4 GB and takes 3 hops.
  const CollectiveTimes ring = CollectiveTimes::Ring(kLink, 4);
  EXPECT_NEAR(ring.reduce_scatter.Seconds(1e9), 0.75 + 3e-5, 1e-12);
  EXPECT_NEAR(ring.all_gather.Seconds(1e9), 0.75 + 3e-5, 1e-12);
  EXPECT_NEAR(ring.all_reduce.Seconds(1e9), 2 * (0.75 + 3e-5), 1e-12);
}

TEST(RingCollectives, OneRankCommunicatesNothing) {
  EXPECT_EQ(CollectiveTimes::Ring(kLink, 1).all_reduce.Seconds(1e9), 0.0);
}

TEST(StageCommunication, EachStageHasItsCollectives) {
  const std::int64_t params = 500'000'000;  // 1 GB of bf16
  const CollectiveTimes ring = CollectiveTimes::Ring(kLink, 4);
  const double pass = ring.reduce_scatter.Seconds(1e9);
  const auto s0 = CommunicationForStage(0, params, Precision::kMixed, ring);
  EXPECT_NEAR(s0.per_step_s, 2 * pass, 1e-12);
  EXPECT_EQ(s0.per_round_s, 0.0);
  const auto s1 = CommunicationForStage(1, params, Precision::kMixed, ring);
  EXPECT_NEAR(s1.per_step_s, 2 * pass, 1e-12);
  EXPECT_EQ(s1.per_round_s, 0.0);
  const auto s2 = CommunicationForStage(2, params, Precision::kMixed, ring);
  EXPECT_NEAR(s2.per_round_s, pass, 1e-12);
  EXPECT_NEAR(s2.per_step_s, pass, 1e-12);
  const auto s3 = CommunicationForStage(3, params, Precision::kMixed, ring);
  EXPECT_NEAR(s3.per_round_s, 3 * pass, 1e-12);
  EXPECT_EQ(s3.per_step_s, 0.0);
  // fp32 moves twice the bytes.
  const auto fp32 = CommunicationForStage(0, params / 2, Precision::kFp32, ring);
  EXPECT_DOUBLE_EQ(fp32.per_step_s, s0.per_step_s);
}

TEST(StageCommunication, UsesMeasuredLinesAsTheyAre) {
  // A backend whose reduce-scatter costs an all-reduce (Gloo in libtorch 1.13) and
  // whose all-gather has a large fixed cost: the stage terms follow the lines.
  CollectiveTimes measured;
  measured.all_reduce = {1e-3, 1e9};
  measured.reduce_scatter = {1e-3, 1e9};
  measured.all_gather = {5e-3, 2e9};
  const std::int64_t params = 250'000'000;  // 1 GB of fp32
  const auto s2 = CommunicationForStage(2, params, Precision::kFp32, measured);
  EXPECT_DOUBLE_EQ(s2.per_round_s, 1e-3 + 1.0);
  EXPECT_DOUBLE_EQ(s2.per_step_s, 5e-3 + 0.5);
  const auto s3 = CommunicationForStage(3, params, Precision::kFp32, measured);
  EXPECT_DOUBLE_EQ(s3.per_round_s, 2 * (5e-3 + 0.5) + 1e-3 + 1.0);
}

TEST(OptimizerSeconds, ScalesWithTheParametersARankUpdates) {
  // Profiled alone (world size 1): stage 0 updates everything at any size, stage 2 on 8
  // ranks an eighth.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0, 800, 1, 8), 0.8);
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 2, 800, 1, 8), 0.1);
  // Profiled on 2 ranks, planned on 4: half the time.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 1, 800, 2, 4), 0.4);
}

}  // namespace
}  // namespace poplar
