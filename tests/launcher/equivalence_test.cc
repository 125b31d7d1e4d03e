// The property that matters most (docs/worker.md, training semantics): for every ZeRO
// stage and every valid plan, training with uneven per-rank micro-batch schedules gives
// the parameters that one device gets training the same global batches. Real processes
// on loopback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

struct Schedule {
  std::string name;
  int stage;
  std::vector<std::vector<int>> ranks;  // global batch 14 in every case
  std::string bucket_mb = "0";          // 0: the default (one bucket for this model)
  std::string gloo_reduce_scatter = "alltoall";
  std::vector<double> state_shares = {};  // empty: the even split
};

std::ostream& operator<<(std::ostream& out, const Schedule& schedule) { return out << schedule.name; }

class Equivalence : public ::testing::TestWithParam<Schedule> {};

constexpr int kSteps = 3;

std::vector<std::string> TrainArgs(const ScratchDir& scratch, const std::string& plan, const std::string& save,
                                   const std::string& metrics, const std::string& bucket_mb = "0") {
  return TrainCommand(
      scratch, plan, kSteps,
      {"--save", save, "--metrics", metrics, "--lr", "1e-3", "--timeout", "60", "--bucket-mb", bucket_mb});
}

// Replaces the value that follows `flag` in `args`.
void SetFlag(std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  const auto at = std::find(args.begin(), args.end(), flag);
  ASSERT_NE(at, args.end()) << flag;
  ASSERT_NE(at + 1, args.end()) << flag;
  *(at + 1) = value;
}

TEST_P(Equivalence, MatchesOneDeviceTrainingTheGlobalBatch) {
  const Schedule& schedule = GetParam();
  ScratchDir scratch("poplar_equivalence");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);

  const std::string one = WritePlan(scratch, "one.json", 0, {{14}});
  const JobOutcome reference = RunJob(scratch, 1, TrainArgs(scratch, one, "reference.pt", "reference.jsonl"));
  ASSERT_TRUE(reference.AllSucceeded()) << reference.Describe();

  const std::string plan = WritePlan(scratch, "plan.json", schedule.stage, schedule.ranks, schedule.state_shares);
  const int world = static_cast<int>(schedule.ranks.size());
  // The workers inherit the test's environment: Gloo's reduce-scatter as the case says.
  setenv("POPLAR_GLOO_REDUCE_SCATTER", schedule.gloo_reduce_scatter.c_str(), 1);
  const JobOutcome job =
      RunJob(scratch, world, TrainArgs(scratch, plan, "ranks.pt", "ranks.jsonl", schedule.bucket_mb));
  unsetenv("POPLAR_GLOO_REDUCE_SCATTER");
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();

  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/reference.pt"), ReadStateDict(scratch.path() + "/ranks.pt"));
  RecordProperty("max_abs_difference", std::to_string(difference));
  std::cout << "[ stage " << schedule.stage << ", " << world << " ranks ] max |difference| = " << difference << "\n";
  // Three AdamW steps at lr 1e-3 move parameters by ~3e-3; float rounding stays ~1e-7.
  EXPECT_LT(difference, 1e-5);

  // Loss and gradient norm (which, unlike Adam's update, shows a gradient scaled
  // wrongly) agree step by step.
  const auto expected = ReadLines(scratch.path() + "/reference.jsonl");
  const auto actual = ReadLines(scratch.path() + "/ranks.jsonl");
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto a = nlohmann::json::parse(expected[i]), b = nlohmann::json::parse(actual[i]);
    EXPECT_NEAR(b["loss"].get<double>(), a["loss"].get<double>(), 1e-5) << "step " << i + 1;
    EXPECT_NEAR(b["grad_norm"].get<double>(), a["grad_norm"].get<double>(), 1e-4 * a["grad_norm"].get<double>())
        << "step " << i + 1;
  }
}

// A backend named explicitly runs a real process group even for one rank (how a
// one-GPU machine tests the NCCL path); alone, its collectives change nothing.
TEST(ExplicitBackend, RunsTheCollectivesAloneWithTheSameResult) {
  ScratchDir scratch("poplar_explicit_backend");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string plan = WritePlan(scratch, "plan.json", stage, {{5, 4, 5}});
    // --log-every 1: rank 0 prints its start line, which names the collectives' backend.
    std::vector<std::string> args = TrainArgs(scratch, plan, "auto.pt", "auto.jsonl");
    SetFlag(args, "--log-every", "1");
    const JobOutcome alone = RunJob(scratch, 1, args);
    ASSERT_TRUE(alone.AllSucceeded()) << alone.Describe();
    EXPECT_TRUE(Contains(alone.errors[0], "collectives none")) << alone.errors[0];

    args = TrainArgs(scratch, plan, "gloo.pt", "gloo.jsonl");
    SetFlag(args, "--log-every", "1");
    args.insert(args.end(), {"--backend", "gloo"});
    const JobOutcome grouped = RunJob(scratch, 1, args);
    ASSERT_TRUE(grouped.AllSucceeded()) << grouped.Describe();
    EXPECT_TRUE(Contains(grouped.errors[0], "collectives gloo")) << grouped.errors[0];
    EXPECT_EQ(MaxAbsDifference(ReadStateDict(scratch.path() + "/auto.pt"), ReadStateDict(scratch.path() + "/gloo.pt")),
              0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    UnevenPlans, Equivalence,
    ::testing::Values(
        Schedule{"Stage0TwoRanks", 0, {{5, 3}, {4, 2}}}, Schedule{"Stage0ThreeRanks", 0, {{5, 3}, {2}, {1, 1, 1, 1}}},
        Schedule{"Stage1TwoRanks", 1, {{5, 3}, {4, 2}}}, Schedule{"Stage1ThreeRanks", 1, {{5, 3}, {2}, {1, 1, 1, 1}}},
        Schedule{"Stage2TwoRanks", 2, {{5, 3, 0}, {2, 2, 2}}},
        Schedule{"Stage2ThreeRanks", 2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}},
        Schedule{"Stage3TwoRanks", 3, {{5, 3, 0}, {2, 2, 2}}},
        Schedule{"Stage3ThreeRanks", 3, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}},
        // 8 KiB buckets: many reductions start during backward, out of
        // step with the other ranks' compute, and must still line up.
        Schedule{"Stage0ManyBuckets", 0, {{5, 3}, {2}, {1, 1, 1, 1}}, "0.008"},
        Schedule{"Stage1ManyBuckets", 1, {{5, 3}, {2}, {1, 1, 1, 1}}, "0.008"},
        Schedule{"Stage2ManyBuckets", 2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}, "0.008"},
        // Gloo's reduce-scatter as an all-reduce of a copy (kept for comparison) must
        // stay exact too.
        Schedule{"Stage2ThreeRanksAllReduce", 2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}, "0.008", "allreduce"},
        // Uneven state shares (flat_layout.h): slices of every size, a rank holding none,
        // a rank holding everything, with one bucket and with many.
        Schedule{"Stage1UnevenShares", 1, {{5, 3}, {2}, {1, 1, 1, 1}}, "0.008", "alltoall", {3, 0, 1}},
        Schedule{"Stage1OneRankHoldsAll", 1, {{5, 3}, {4, 2}}, "0", "alltoall", {0, 1}},
        Schedule{"Stage2UnevenShares", 2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}, "0.008", "alltoall", {0.5, 2, 0.25}},
        Schedule{"Stage2UnevenSharesOneBucket", 2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}, "0", "alltoall", {1, 5, 0}},
        Schedule{"Stage3UnevenShares", 3, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}, "0", "alltoall", {0, 2, 1}},
        Schedule{"Stage3OneRankHoldsAll", 3, {{5, 3, 0}, {2, 2, 2}}, "0", "alltoall", {7, 0}}),
    [](const ::testing::TestParamInfo<Schedule>& info) { return info.param.name; });

}  // namespace
}  // namespace poplar::testing
