#include "planner/cost_model.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

const LinkSpec kLink{1e9, 1e-5};  // 1 GB/s, 10 us per hop

TEST(RingCollectives, FollowTheRingFormulas) {
  // 4 ranks, 1 GB: reduce-scatter moves 3/4 GB and takes 3 hops.
  EXPECT_DOUBLE_EQ(RingReduceScatterSeconds(1e9, 4, kLink), 0.75 + 3e-5);
  EXPECT_DOUBLE_EQ(RingAllGatherSeconds(1e9, 4, kLink), 0.75 + 3e-5);
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(1e9, 4, kLink), 2 * (0.75 + 3e-5));
}

TEST(RingCollectives, OneRankCommunicatesNothing) {
  EXPECT_EQ(RingAllReduceSeconds(1e9, 1, kLink), 0.0);
}

TEST(StageCommunication, EachStageHasItsCollectives) {
  const std::int64_t params = 500'000'000;  // 1 GB of bf16
  const double pass = RingReduceScatterSeconds(1e9, 4, kLink);
  const auto s0 = CommunicationForStage(0, params, Precision::kMixed, 4, kLink);
  EXPECT_DOUBLE_EQ(s0.per_step_s, 2 * pass);
  EXPECT_EQ(s0.per_round_s, 0.0);
  const auto s1 = CommunicationForStage(1, params, Precision::kMixed, 4, kLink);
  EXPECT_DOUBLE_EQ(s1.per_step_s, 2 * pass);
  EXPECT_EQ(s1.per_round_s, 0.0);
  const auto s2 = CommunicationForStage(2, params, Precision::kMixed, 4, kLink);
  EXPECT_DOUBLE_EQ(s2.per_round_s, pass);
  EXPECT_DOUBLE_EQ(s2.per_step_s, pass);
  const auto s3 = CommunicationForStage(3, params, Precision::kMixed, 4, kLink);
  EXPECT_DOUBLE_EQ(s3.per_round_s, 3 * pass);
  EXPECT_EQ(s3.per_step_s, 0.0);
  // fp32 moves twice the bytes.
  const auto fp32 = CommunicationForStage(0, params / 2, Precision::kFp32, 4, kLink);
  EXPECT_DOUBLE_EQ(fp32.per_step_s, s0.per_step_s);
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
