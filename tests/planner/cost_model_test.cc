#include "planner/model/cost_model.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster/cluster.h"
#include "planner/search/stage_problem.h"

namespace poplar {
namespace {

const LinkSpec kLink{1e9, 1e-5};  // 1 GB/s, 10 us per hop

// Two ranks of one type on one node, 8 Gb/s and 100 us declared.
ClusterSpec TwoGpus() {
  return ParseClusterYaml(R"(training: {global_batch: 8, precision: fp32}
network: {intra_node: {bandwidth_gbps: 8, latency_us: 100}}
nodes: [{name: a, devices: [{type: gpu, count: 2}]}])",
                          "cluster.yaml");
}

// A profile of `params` parameters with the given stages, each fitting 8 samples at
// 0.1 s a sample; `collectives` recorded as given (none: the table applies).
DeviceProfile GpuProfile(std::int64_t params, const std::vector<int>& stages,
                         const std::optional<CollectiveParams>& collectives) {
  DeviceProfile profile;
  profile.device_type = "gpu";
  profile.memory_bytes = std::int64_t{1} << 40;
  profile.model.params = params;
  for (int stage : stages) {
    StageProfile measured;
    measured.stage = stage;
    measured.max_micro_batch = 8;
    measured.points = {{1, 0.1, 1 << 20}, {8, 0.8, 8 << 20}};
    measured.collectives = collectives;
    profile.stages.push_back(measured);
  }
  return profile;
}

TEST(LinkCollectives, FollowTheRingFormulas) {
  // 4 ranks, 1 GB: reduce-scatter moves 3/4 GB and takes 3 hops; the all-reduce moves
  // twice that, and pays a tree's 2 x 2 hops rather than the ring's 2 x 3.
  const CollectiveTimes ring = CollectiveTimes::OverLink(kLink, 4);
  EXPECT_NEAR(ring.reduce_scatter.Seconds(1e9), 0.75 + 3e-5, 1e-12);
  EXPECT_NEAR(ring.all_gather.Seconds(1e9), 0.75 + 3e-5, 1e-12);
  EXPECT_NEAR(ring.all_reduce.Seconds(1e9), 2 * 0.75 + 4e-5, 1e-12);
}

TEST(LinkCollectives, AllReduceLatencyGrowsLikeATreeOnManyRanks) {
  // 1,024 ranks: 2 x 10 hops, where a ring would take 2 x 1,023 (20 ms at 10 us).
  EXPECT_NEAR(CollectiveTimes::OverLink(kLink, 1024).all_reduce.fixed_s, 20 * 1e-5, 1e-15);
  EXPECT_NEAR(CollectiveTimes::OverLink(kLink, 1024).reduce_scatter.fixed_s, 1023 * 1e-5, 1e-15);
  // 2 and 3 ranks: the ring is no longer (1 and 2 hops each way).
  EXPECT_NEAR(CollectiveTimes::OverLink(kLink, 2).all_reduce.fixed_s, 2 * 1e-5, 1e-15);
  EXPECT_NEAR(CollectiveTimes::OverLink(kLink, 3).all_reduce.fixed_s, 4 * 1e-5, 1e-15);
}

TEST(LinkCollectives, OneRankCommunicatesNothing) {
  EXPECT_EQ(CollectiveTimes::OverLink(kLink, 1).all_reduce.Seconds(1e9), 0.0);
}

TEST(StageCommunication, EachStageHasItsCollectives) {
  const std::int64_t params = 500'000'000;  // 1 GB of bf16
  const CollectiveTimes ring = CollectiveTimes::OverLink(kLink, 4);
  const double pass = ring.reduce_scatter.Seconds(1e9);
  auto table = [&](int stage, std::int64_t p, Precision precision) {
    return CommunicationForStage(TableCollectiveParams(stage, p), precision, ring);
  };
  const auto s0 = table(0, params, Precision::kMixed);
  EXPECT_NEAR(s0.per_step_s, ring.all_reduce.Seconds(1e9), 1e-12);  // 2 passes' bytes, a tree's latency
  EXPECT_NEAR(s0.per_step_s, 2 * pass - 2e-5, 1e-12);
  EXPECT_EQ(s0.per_round_s, 0.0);
  const auto s1 = table(1, params, Precision::kMixed);
  EXPECT_NEAR(s1.per_step_s, 2 * pass, 1e-12);
  EXPECT_EQ(s1.per_round_s, 0.0);
  const auto s2 = table(2, params, Precision::kMixed);
  EXPECT_NEAR(s2.per_round_s, pass, 1e-12);
  EXPECT_NEAR(s2.per_step_s, pass, 1e-12);
  const auto s3 = table(3, params, Precision::kMixed);
  EXPECT_NEAR(s3.per_round_s, 3 * pass, 1e-12);
  EXPECT_EQ(s3.per_step_s, 0.0);
  // fp32 moves twice the bytes.
  const auto fp32 = table(0, params / 2, Precision::kFp32);
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
  const auto s2 = CommunicationForStage(TableCollectiveParams(2, params), Precision::kFp32, measured);
  EXPECT_DOUBLE_EQ(s2.per_round_s, 1e-3 + 1.0);
  EXPECT_DOUBLE_EQ(s2.per_step_s, 5e-3 + 0.5);
  const auto s3 = CommunicationForStage(TableCollectiveParams(3, params), Precision::kFp32, measured);
  EXPECT_DOUBLE_EQ(s3.per_round_s, 2 * (5e-3 + 0.5) + 1e-3 + 1.0);
}

TEST(StageCommunication, ChargesWhatTheWorkersScheduleMovesCallByCall) {
  // A stage-3 schedule as a profile records it: 1.6 of the 2 gathers' parameters in 26
  // calls per round, the gradients in 13; each call pays the fixed cost once.
  CollectiveTimes times;
  times.all_reduce = {1e-3, 1e9};
  times.reduce_scatter = {2e-3, 1e9};
  times.all_gather = {1e-4, 2e9};
  CollectiveParams moved;
  moved.all_gather_per_round = {400'000'000, 26};
  moved.reduce_scatter_per_round = {250'000'000, 13};
  const auto comm = CommunicationForStage(moved, Precision::kFp32, times);
  EXPECT_DOUBLE_EQ(comm.per_round_s, 26 * 1e-4 + 1.6e9 / 2e9 + 13 * 2e-3 + 1e9 / 1e9);
  EXPECT_EQ(comm.per_step_s, 0.0);  // nothing per step, not even a fixed cost
}

TEST(StageProblem, ChargesTheCollectivesTheProfileRecordsInsteadOfTheTable) {
  const ClusterSpec cluster = TwoGpus();  // 250M parameters: 1 GB of fp32
  std::map<std::string, DeviceProfile> profiles = {{"gpu", GpuProfile(250'000'000, {3}, std::nullopt)}};
  const CollectiveTimes ring = cluster.Collectives();
  // Without a record: the table's two gathers and one reduce-scatter of P, one call each.
  const double table = BuildStageProblem(cluster, profiles, 3).comm_per_round_s;
  EXPECT_NEAR(table, 2 * ring.all_gather.Seconds(1e9) + ring.reduce_scatter.Seconds(1e9), 1e-12);
  // With the worker's record: 1.6 P gathered in 10 calls, P reduce-scattered in 5.
  CollectiveParams recorded;
  recorded.all_gather_per_round = {400'000'000, 10};
  recorded.reduce_scatter_per_round = {250'000'000, 5};
  profiles["gpu"].stages[0].collectives = recorded;
  const double charged = BuildStageProblem(cluster, profiles, 3).comm_per_round_s;
  EXPECT_NEAR(charged,
              10 * ring.all_gather.fixed_s + 1.6e9 / ring.all_gather.payload_bytes_per_s +
                  5 * ring.reduce_scatter.fixed_s + 1e9 / ring.reduce_scatter.payload_bytes_per_s,
              1e-12);
  EXPECT_LT(charged, table);
}

TEST(StageProblem, AOneRankJobComputesAtTheProfilesGraphReplayTimes) {
  // A one-rank job replays its micro-batches from CUDA graphs where the profile timed
  // that (stages 0-1 on a GPU); a job of more ranks runs them eagerly.
  DeviceProfile profile = GpuProfile(1'000'000, {0, 1}, std::nullopt);
  profile.stages[0].points[0].graph_compute_s = 0.03;  // 1 sample: 0.1 s eagerly
  const std::map<std::string, DeviceProfile> profiles = {{"gpu", profile}};
  const ClusterSpec one = ParseClusterYaml(R"(training: {global_batch: 8, precision: fp32}
nodes: [{name: a, devices: [{type: gpu, count: 1}]}])",
                                           "cluster.yaml");
  const StageProblem alone = BuildStageProblem(one, profiles, 0);
  ASSERT_TRUE(alone.feasible) << alone.infeasible_reason;
  EXPECT_DOUBLE_EQ(alone.classes[0].compute.Time(1), 0.03);
  EXPECT_DOUBLE_EQ(alone.classes[0].compute.Time(8), 0.8);  // not replayed: eager
  const StageProblem stage_one = BuildStageProblem(one, profiles, 1);
  EXPECT_DOUBLE_EQ(stage_one.classes[0].compute.Time(1), 0.1);  // no graph time at stage 1
  const StageProblem two = BuildStageProblem(TwoGpus(), profiles, 0);
  ASSERT_TRUE(two.feasible) << two.infeasible_reason;
  EXPECT_DOUBLE_EQ(two.classes[0].compute.Time(1), 0.1);
}

TEST(StageProblem, ChargesTheTrainingLoopsScalarAllReducesPerStep) {
  // Loss every stage, gradient norm from stage 1 on: each an all-reduce's fixed cost
  // (plus one element), beside the engine's collectives, here none.
  const ClusterSpec cluster = TwoGpus();
  const std::map<std::string, DeviceProfile> profiles = {
      {"gpu", GpuProfile(1'000'000, {0, 1, 2, 3}, CollectiveParams{})}};
  const CollectiveLine all_reduce = cluster.Collectives().all_reduce;
  const double one_scalar = all_reduce.Seconds(4.0);  // one fp32 element
  EXPECT_NEAR(BuildStageProblem(cluster, profiles, 0).comm_per_step_s, one_scalar, 1e-15);
  for (int stage = 1; stage <= 3; ++stage) {
    const StageProblem problem = BuildStageProblem(cluster, profiles, stage);
    EXPECT_NEAR(problem.comm_per_step_s, 2 * one_scalar, 1e-15) << stage;
    EXPECT_EQ(problem.comm_per_round_s, 0.0) << stage;
  }
}

TEST(OptimizerSeconds, ScalesWithTheParametersARankUpdates) {
  // Profiled holding the whole state: stage 0 updates everything at any size, stage 2 on
  // 8 ranks an eighth.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0, 0, 800, 1.0, 1.0 / 8), 0.8);
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0, 2, 800, 1.0, 1.0 / 8), 0.1);
  // Profiled on 2 ranks, planned on 4: half the time.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0, 1, 800, 0.5, 0.25), 0.4);
  // Profiled holding 1/64 of the state (a device too small for all of it), planned to
  // hold half: 32 times as long; a share of 0 updates nothing.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.1, 0, 3, 6400, 1.0 / 64, 0.5), 3.2);
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.1, 0, 3, 6400, 1.0 / 64, 0.0), 0.0);
}

TEST(OptimizerSeconds, AFixedPartDoesNotShrinkWithTheState) {
  // 0.2 s of the 0.8 s profiled holding everything is fixed: an eighth of the state takes
  // 0.2 + 0.6 / 8; a rank holding nothing still pays the fixed part.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0.2, 2, 800, 1.0, 1.0 / 8), 0.2 + 0.6 / 8);
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0.2, 2, 800, 1.0, 0.0), 0.2);
  // At stage 0 nothing scales; a fixed part above the whole is the whole.
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 0.2, 0, 800, 1.0, 1.0 / 8), 0.8);
  EXPECT_DOUBLE_EQ(OptimizerSeconds(0.8, 1.5, 1, 800, 1.0, 0.5), 0.8);
}

}  // namespace
}  // namespace poplar
