// Uneven state shares in the planner (planner.h): the grid of class shares searched
// exactly, checked against a brute force over the same grid with the exhaustive solver;
// what a split changes in the problem (memory cap, optimizer, the collectives' pace);
// the plan file's shares; training.state_split: even.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "exhaustive_solver.h"
#include "planner/base/input_error.h"
#include "planner/cluster/cluster.h"
#include "planner/formats/worker_plan.h"
#include "planner/model/memory_model.h"
#include "planner/search/plan_file.h"
#include "planner/search/plan_report.h"
#include "planner/search/planner.h"
#include "planner/search/search.h"
#include "planner/search/simulator.h"

namespace poplar {
namespace {

constexpr std::int64_t kParams = 50'000'000;  // fp32: 16 bytes a parameter, 800 MB of states
constexpr std::int64_t kSampleBytes = 200'000'000;

// Two slow devices with much memory and one fast device with little, at `global_batch`
// (classes in that order: big, fast).
ClusterSpec SkewedCluster(int global_batch, const std::string& split = "auto") {
  return ParseClusterYaml(
      "training: {global_batch: " + std::to_string(global_batch) + ", precision: fp32, state_split: " + split + R"(}
network: {intra_node: {bandwidth_gbps: 2400, latency_us: 10}, inter_node: {bandwidth_gbps: 400, latency_us: 20}}
nodes:
  - {name: b, devices: [{type: big, count: 2}]}
  - {name: a, devices: [{type: fast, count: 1}]})",
      "skewed.yaml");
}

// A profile measured with the even split on `world` ranks: per sample `sample_s` and
// kSampleBytes beside the states and 50 MB of fixed overhead; stages where no sample fit
// are left out, as poplar-worker profile leaves them.
DeviceProfile Profile(const std::string& type, std::int64_t memory_bytes, double sample_s, int world) {
  DeviceProfile profile;
  profile.file = type + ".json";
  profile.device_type = type;
  profile.memory_bytes = memory_bytes;
  profile.model.params = kParams;
  profile.model.precision = Precision::kFp32;
  for (int stage = 0; stage <= 3; ++stage) {
    StageProfile measured;
    measured.stage = stage;
    measured.world_size = world;
    measured.optimizer_step_s = 0.002;
    const std::int64_t states = ModelStatesPerRank(kParams, stage, world, Precision::kFp32).Total() + 50'000'000;
    if (states + kSampleBytes > memory_bytes) continue;
    measured.max_micro_batch = static_cast<int>((memory_bytes - states) / kSampleBytes);
    for (int b = 1; b <= std::min(measured.max_micro_batch, 4); ++b) {
      measured.points.push_back({b, 0.005 + sample_s * b, states + kSampleBytes * b});
    }
    profile.stages.push_back(measured);
  }
  return profile;
}

// big: 16 GB, profiled on 3 ranks. fast: 3x faster, 500 MB, profiled on 8 ranks (only
// stage 3 fit there); on these 3 its even share of the states leaves no room for a
// sample (but does for building the engine: the model whole, 200 MB, beside 267 MB).
std::map<std::string, DeviceProfile> SkewedProfiles() {
  return {{"fast", Profile("fast", 500'000'000, 0.01, 8)}, {"big", Profile("big", 16'000'000'000, 0.03, 3)}};
}

TEST(StateSplit, AMemoryPoorFastDeviceHoldsLessStateAndTheStepIsShorter) {
  const auto profiles = SkewedProfiles();
  const PlanResult uneven = MakePlan(SkewedCluster(36), profiles, Policy::kPoplar);
  const PlanResult even = MakePlan(SkewedCluster(36, "even"), profiles, Policy::kPoplar);
  for (int stage = 1; stage <= 3; ++stage) EXPECT_TRUE(even.stages[stage].problem.state_shares.empty());
  const StageOutcome& chosen = uneven.Chosen();
  ASSERT_FALSE(chosen.problem.state_shares.empty()) << "the even split was kept";
  const double fast_share = chosen.problem.state_shares[1];  // classes in cluster order: big, then fast
  EXPECT_EQ(chosen.problem.classes[1].type, "fast");
  EXPECT_LT(fast_share, 1.0 / 3);
  EXPECT_EQ(even.stages[chosen.problem.stage].problem.classes[1].max_micro_batch, 0);
  EXPECT_GT(chosen.problem.classes[1].max_micro_batch, 0);
  EXPECT_LT(chosen.prediction.step_s, even.Chosen().prediction.step_s);
  ASSERT_TRUE(chosen.even_split.has_value());
  std::cout << "[ skewed, global batch 36 ] even: stage " << even.chosen_stage << " " << even.Chosen().prediction.step_s
            << " s; uneven: stage " << uneven.chosen_stage << " " << chosen.prediction.step_s << " s, fast holds "
            << fast_share << ", each big " << chosen.problem.state_shares[0] << "\n"
            << StateSplitLines(uneven);
}

// The planner's split is the best of the whole grid: every split of 64 parts between the
// two classes, each solved by the exhaustive reference solver (not the search).
TEST(StateSplit, TheChosenSplitIsTheBestOfTheGridByBruteForce) {
  const auto profiles = SkewedProfiles();
  bool any_uneven = false;
  for (const int batch : {5, 7}) {
    const ClusterSpec cluster = SkewedCluster(batch);
    const PlanResult result = MakePlan(cluster, profiles, Policy::kPoplar);
    for (int stage = 1; stage <= 3; ++stage) {
      SCOPED_TRACE("batch " + std::to_string(batch) + ", stage " + std::to_string(stage));
      double best = std::numeric_limits<double>::infinity();
      const StageProblem even = BuildStageProblem(cluster, profiles, stage);
      if (even.feasible) best = testing::SolveExhaustively(even).step_s;
      for (int big = 0; big <= kStateShareGrid; ++big) {
        const std::vector<double> shares = {big / (2.0 * kStateShareGrid),
                                            (kStateShareGrid - big) / static_cast<double>(kStateShareGrid)};
        const StageProblem problem = BuildStageProblem(cluster, profiles, stage, shares);
        if (!problem.feasible) continue;
        best = std::min(best, testing::SolveExhaustively(problem).step_s);
      }
      const StageOutcome& outcome = result.stages[stage];
      ASSERT_EQ(outcome.feasible, std::isfinite(best)) << outcome.reason;
      if (outcome.feasible) {
        EXPECT_NEAR(outcome.prediction.step_s, best, 1e-12);
      }
      any_uneven = any_uneven || !outcome.problem.state_shares.empty();
    }
  }
  EXPECT_TRUE(any_uneven) << "the grid's best was the even split everywhere: a weak check";
}

// Four device types, more than the grid is searched for (kMostStateShareClasses): a fast
// device with little memory beside three slow types with more, classes in this order.
ClusterSpec FourTypeCluster(int global_batch) {
  return ParseClusterYaml("training: {global_batch: " + std::to_string(global_batch) + R"(, precision: fp32}
network: {intra_node: {bandwidth_gbps: 2400, latency_us: 10}, inter_node: {bandwidth_gbps: 400, latency_us: 20}}
nodes:
  - {name: b, devices: [{type: big, count: 2}]}
  - {name: h, devices: [{type: huge, count: 1}]}
  - {name: m, devices: [{type: mid, count: 1}]}
  - {name: a, devices: [{type: fast, count: 1}]})",
                          "four.yaml");
}

// With more types than the grid, the planner searches the splits in which the classes
// with the least memory hold nothing and the others hold the state evenly per device:
// its choice is the best of those and the even split, each solved by the exhaustive
// reference solver, and here the fast device holds nothing.
TEST(StateSplit, MoreTypesThanTheGridTryTheLeastMemoryHoldingNothing) {
  const std::map<std::string, DeviceProfile> profiles = {{"fast", Profile("fast", 500'000'000, 0.01, 8)},
                                                         {"mid", Profile("mid", 8'000'000'000, 0.03, 3)},
                                                         {"big", Profile("big", 16'000'000'000, 0.03, 3)},
                                                         {"huge", Profile("huge", 32'000'000'000, 0.03, 3)}};
  const ClusterSpec cluster = FourTypeCluster(9);
  const PlanResult result = MakePlan(cluster, profiles, Policy::kPoplar);
  // Holders by the least memory left out: all but fast (4 devices), big and huge (3),
  // huge alone (1); classes big, huge, mid, fast.
  const std::vector<std::vector<double>> family = {{0.25, 0.25, 0.25, 0}, {1.0 / 3, 1.0 / 3, 0, 0}, {0, 1, 0, 0}};
  bool any_uneven = false;
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    double best = std::numeric_limits<double>::infinity();
    const StageProblem even = BuildStageProblem(cluster, profiles, stage);
    if (even.feasible) best = testing::SolveExhaustively(even).step_s;
    for (const std::vector<double>& shares : family) {
      const StageProblem problem = BuildStageProblem(cluster, profiles, stage, shares);
      if (problem.feasible) best = std::min(best, testing::SolveExhaustively(problem).step_s);
    }
    const StageOutcome& outcome = result.stages[stage];
    ASSERT_EQ(outcome.feasible, std::isfinite(best)) << outcome.reason;
    if (outcome.feasible) {
      EXPECT_NEAR(outcome.prediction.step_s, best, 1e-12);
    }
    if (!outcome.problem.state_shares.empty()) {
      any_uneven = true;
      EXPECT_EQ(outcome.problem.classes[3].type, "fast");
      EXPECT_EQ(outcome.problem.state_shares[3], 0.0);
      EXPECT_EQ(even.classes[3].max_micro_batch, 0) << "the even split leaves the fast device no sample";
      EXPECT_GT(outcome.problem.classes[3].max_micro_batch, 0);
    }
  }
  EXPECT_TRUE(any_uneven) << "the even split won at every stage: a weak check";
}

TEST(StateSplit, SharesSetTheCapTheOptimizerAndTheCollectivesPace) {
  const ClusterSpec cluster = SkewedCluster(36);
  const auto profiles = SkewedProfiles();
  const StageProblem even = BuildStageProblem(cluster, profiles, 3);
  // Each big device holds half, the fast one none.
  const StageProblem split = BuildStageProblem(cluster, profiles, 3, {0.5, 0.0});
  EXPECT_EQ(split.classes[1].memory.model_state_bytes, ModelStatesForShare(kParams, 3, 0, Precision::kFp32).Total());
  EXPECT_GT(split.classes[1].memory.max_micro_batch, even.classes[1].memory.max_micro_batch);
  EXPECT_LT(split.classes[0].memory.max_micro_batch, even.classes[0].memory.max_micro_batch);
  // (ceil(P/2) parameters against ceil(P/3): 1.5 within the rounding)
  EXPECT_NEAR(split.classes[0].optimizer_s, 1.5 * even.classes[0].optimizer_s, 1e-6 * even.classes[0].optimizer_s);
  EXPECT_EQ(split.classes[1].optimizer_s, 0);
  // The largest slice is 1.5 times the even one: the bytes of every gather and scatter
  // take 1.5 times as long, the calls' fixed costs stay.
  EXPECT_GT(split.comm_per_round_s, even.comm_per_round_s);
  EXPECT_LT(split.comm_per_round_s, 1.5 * even.comm_per_round_s);
}

TEST(StateSplit, ThePlanFileGivesEveryRankItsClassShare) {
  const ClusterSpec cluster = SkewedCluster(36);
  const auto profiles = SkewedProfiles();
  const PlanResult result = MakePlan(cluster, profiles, Policy::kPoplar);
  ASSERT_FALSE(result.Chosen().problem.state_shares.empty());
  const WorkerPlan plan = ParseWorkerPlan(PlanToJson(cluster, profiles, result).dump(), "plan.json");
  ASSERT_EQ(plan.state_shares.size(), 3u);
  double sum = 0;
  for (int rank = 0; rank < 3; ++rank) {
    const int device_class = plan.placement[rank].device_type == "big" ? 0 : 1;
    EXPECT_EQ(plan.state_shares[rank], result.Chosen().problem.state_shares[device_class]);
    sum += plan.state_shares[rank];
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

// simulate --plan predicts a plan with its shares, as the planner did; a plan whose
// ranks of one type hold different shares cannot be modelled and says so.
TEST(StateSplit, APlanIsPredictedWithItsShares) {
  const ClusterSpec cluster = SkewedCluster(36);
  const auto profiles = SkewedProfiles();
  const PlanResult result = MakePlan(cluster, profiles, Policy::kPoplar);
  nlohmann::json document = PlanToJson(cluster, profiles, result);
  EXPECT_NEAR(PredictPlan(cluster, profiles, ParseWorkerPlan(document.dump(), "plan.json")).step_s,
              result.Chosen().prediction.step_s, 1e-12);
  document["ranks"][0]["state_share"] = 0.3;
  try {
    PredictPlan(cluster, profiles, ParseWorkerPlan(document.dump(), "plan.json"));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.key(), "ranks[1].state_share");
    EXPECT_EQ(error.reason(),
              "differs from rank 0's, of the same device type big: the cost model gives every device of a type one "
              "share");
  }
}

TEST(StateSplit, AnUnknownSplitIsRefusedNamingTheKey) {
  try {
    SkewedCluster(36, "skewed");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.key(), "training.state_split");
    EXPECT_EQ(error.reason(), "must be auto or even, got 'skewed' (line 1)");
  }
}

}  // namespace
}  // namespace poplar
