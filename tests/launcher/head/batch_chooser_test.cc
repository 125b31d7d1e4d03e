// The BatchChooser (launcher/head/batch_chooser.h) with a noise scale given by the test:
// a small noise scale shrinks the batch, a growing one grows it, always within the
// bounds and only every `every` steps; no noise scale, or no step left to gain, keeps
// the batch.
#include "launcher/head/batch_chooser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "planner/cluster/cluster_profiles.h"
#include "planner/search/plan_file.h"
#include "planner/search/planner.h"
#include "test_support.h"

namespace poplar {
namespace {

using ::poplar::testing::Contains;

TEST(CandidateBatches, ALadderFromBoundToBoundWithTheRunningBatch) {
  const std::vector<std::int64_t> batches = CandidateBatches(32, 512, 100);
  ASSERT_GE(batches.size(), 10u);
  EXPECT_EQ(batches.front(), 32);
  EXPECT_EQ(batches.back(), 512);
  EXPECT_NE(std::find(batches.begin(), batches.end(), 100), batches.end());
  for (std::size_t i = 1; i < batches.size(); ++i) {
    EXPECT_GT(batches[i], batches[i - 1]);
    EXPECT_LE(static_cast<double>(batches[i]) / static_cast<double>(batches[i - 1]), 1.2 + 1e-9) << batches[i];
  }
  EXPECT_EQ(CandidateBatches(8, 8, 8), std::vector<std::int64_t>{8});
  EXPECT_EQ(CandidateBatches(1, 2, 1), (std::vector<std::int64_t>{1, 2}));
}

TEST(StatisticalEfficiency, IsTheProgressPerSampleAgainstTheRunningBatch) {
  EXPECT_DOUBLE_EQ(StatisticalEfficiency(100, 64, 64), 1.0);
  EXPECT_DOUBLE_EQ(StatisticalEfficiency(100, 300, 100), 200.0 / 400.0);
  EXPECT_DOUBLE_EQ(StatisticalEfficiency(100, 50, 100), 200.0 / 150.0);
  // A large noise scale: every sample is worth the same at any batch.
  EXPECT_NEAR(StatisticalEfficiency(1e12, 1024, 32), 1.0, 1e-9);
}

// The noise scale needs a local gradient of fewer samples than the batch.
TEST(MeasuresNoise, NeedsALocalGradientSmallerThanTheBatch) {
  const auto plan = [](int stage, int batch, const std::string& first, const std::string& second) {
    return ParseWorkerPlan(R"({"stage": )" + std::to_string(stage) + R"(, "global_batch": )" + std::to_string(batch) +
                               R"(, "ranks": [{"rank": 0, "micro_batches": )" + first +
                               R"(}, {"rank": 1, "micro_batches": )" + second + "}]}",
                           "plan.json");
  };
  EXPECT_TRUE(MeasuresNoise(plan(0, 10, "[4, 4]", "[2]")));
  EXPECT_FALSE(MeasuresNoise(plan(0, 8, "[4, 4]", "[]")));  // one rank's whole batch, in two micro-batches
  EXPECT_FALSE(MeasuresNoise(plan(1, 8, "[8]", "[]")));
  EXPECT_TRUE(MeasuresNoise(plan(2, 8, "[4, 4]", "[0, 0]")));  // stages 2-3: each round's micro-batch
  EXPECT_FALSE(MeasuresNoise(plan(3, 8, "[8]", "[0]")));
  EXPECT_TRUE(MeasuresNoise(plan(3, 8, "[6]", "[2]")));
}

class BatchChooserTest : public ::testing::Test {
 protected:
  // Four V100s and four T4s (configs/v100-and-t4.yaml, global batch 128), planned from
  // their profiles.
  BatchChooserTest()
      : cluster_(LoadClusterFile(POPLAR_SOURCE_DIR "/configs/v100-and-t4.yaml")),
        profiles_(LoadClusterProfiles(cluster_, cluster_.profiles_dir)),
        plan_(ParseWorkerPlan(PlanToJson(cluster_, profiles_, MakePlan(cluster_, profiles_, Policy::kPoplar)).dump(),
                              "plan.json")) {}

  // Rank 0's record of `step` on plan `number`, with `noise` as its noise scale (none: < 0).
  static nlohmann::json Record(std::int64_t step, int number, double noise) {
    nlohmann::json record = {{"step", step}, {"rank", 0}, {"plan", number}, {"compute_s", 0.1}};
    if (noise >= 0) record["noise_scale"] = noise;
    return record;
  }

  // Trains steps from `*step` to `last` with the noise scale `noise(step)`, handing every
  // proposal as the next plan; returns the batch of each step.
  std::vector<std::int64_t> Train(BatchChooser& chooser, std::int64_t* step, std::int64_t last,
                                  const std::function<double(std::int64_t)>& noise) {
    std::vector<std::int64_t> batches;
    for (; *step <= last; ++*step) {
      batches.push_back(running_.global_batch);
      const auto choice = chooser.Metrics(0, Record(*step, number_, noise(*step)), Known());
      EXPECT_FALSE(chooser.Metrics(1, Record(*step, number_, noise(*step)), Known())) << "rank 1 counts";
      if (!choice) continue;
      const WorkerPlan next = ParseWorkerPlan(choice->plan_text, "plan-" + std::to_string(number_ + 1) + ".json");
      EXPECT_EQ(next.global_batch, choice->global_batch);
      EXPECT_NO_THROW(RequireSwitchable(plan_, next, 32, 1024)) << choice->reason;
      chooser.Handed(++number_);
      running_ = next;
    }
    return batches;
  }

  // The profiles as the launch hands them to the chooser.
  BatchChooser::Profiles Known() const {
    return [this] { return profiles_; };
  }

  ClusterSpec cluster_;
  std::map<std::string, DeviceProfile> profiles_;
  WorkerPlan plan_;
  WorkerPlan running_ = plan_;
  int number_ = 0;
};

TEST_F(BatchChooserTest, AGrowingNoiseScaleGrowsTheBatchWithinTheBounds) {
  BatchChooser chooser(cluster_, plan_, {32, 1024, 10, 0.05, 400});
  std::vector<nlohmann::ordered_json> judgements;
  chooser.RecordJudgements([&](const nlohmann::ordered_json& judgement) { judgements.push_back(judgement); });
  std::int64_t step = 1;
  // A small noise scale: smaller batches make nearly the same progress per step, faster.
  const std::vector<std::int64_t> early = Train(chooser, &step, 40, [](std::int64_t) { return 4.0; });
  EXPECT_EQ(early.front(), 128);
  EXPECT_LT(running_.global_batch, 128) << chooser.last_line();
  // The noise scale then grows to a million samples (every sample then worth the same at
  // any batch: the most throughput wins): the batch follows it up, never down.
  const std::int64_t low = running_.global_batch;
  const std::vector<std::int64_t> later =
      Train(chooser, &step, 400, [](std::int64_t s) { return 4.0 * std::pow(250'000.0, (s - 40) / 360.0); });
  for (std::size_t i = 1; i < later.size(); ++i) EXPECT_GE(later[i], later[i - 1]) << "step " << 41 + i;
  EXPECT_GT(running_.global_batch, 4 * low) << chooser.last_line();
  for (const std::int64_t batch : later) {
    EXPECT_GE(batch, 32);
    EXPECT_LE(batch, 1024);
  }
  // Judged every 10 steps of rank 0, each recorded with its candidates.
  ASSERT_FALSE(judgements.empty());
  EXPECT_EQ(judgements.front()["step"], 10);
  for (const auto& judgement : judgements) {
    EXPECT_EQ(judgement["step"].get<std::int64_t>() % 10, 0) << judgement.dump();
    EXPECT_GE(judgement["candidates"].size(), 10u);
  }
  int switches = 0;
  for (std::size_t i = 1; i < early.size(); ++i) switches += early[i] != early[i - 1];
  for (std::size_t i = 1; i < later.size(); ++i) switches += later[i] != later[i - 1];
  EXPECT_EQ(switches, number_);
  EXPECT_LE(switches, 12) << "a switch at most every few judgements";
}

TEST_F(BatchChooserTest, NoNoiseScaleOrNoStepLeftKeepsTheBatch) {
  BatchChooser chooser(cluster_, plan_, {32, 1024, 10, 0.05, 45});
  std::vector<nlohmann::ordered_json> judgements;
  chooser.RecordJudgements([&](const nlohmann::ordered_json& judgement) { judgements.push_back(judgement); });
  std::int64_t step = 1;
  Train(chooser, &step, 20, [](std::int64_t) { return -1.0; });
  EXPECT_EQ(number_, 0);
  EXPECT_TRUE(Contains(chooser.last_line(), "batch 128 kept: no positive noise scale measured yet"))
      << chooser.last_line();
  Train(chooser, &step, 30, [](std::int64_t) { return 0.0; });
  EXPECT_EQ(number_, 0);
  // A noise scale that calls for a much smaller batch, 15 steps before the end: too few
  // to gain from a switch (at least `every` are needed).
  Train(chooser, &step, 45, [](std::int64_t) { return 2.0; });
  EXPECT_EQ(number_, 0);
  EXPECT_TRUE(Contains(chooser.last_line(), "too few steps left")) << chooser.last_line();
  EXPECT_EQ(judgements.size(), 4u);
}

// The same batch trains whatever the schedule: another proposer's plan (the rebalancer's)
// goes on counting the batch's steps; a plan switched by hand is not judged.
TEST_F(BatchChooserTest, FollowsTheRebalancersPlansAndLeavesAHandSwitchAlone) {
  BatchChooser chooser(cluster_, plan_, {32, 1024, 10, 0.05, 400});
  for (std::int64_t step = 1; step <= 5; ++step) ASSERT_FALSE(chooser.Metrics(0, Record(step, 0, 1e9), Known()));
  chooser.Following(plan_, 1);
  std::optional<BatchChoice> choice;
  for (std::int64_t step = 6; step <= 10; ++step) choice = chooser.Metrics(0, Record(step, 1, 1e9), Known());
  ASSERT_TRUE(choice) << "judged at 10 steps of the batch, plans 0 and 1";
  EXPECT_GT(choice->global_batch, 128) << choice->reason;  // no noise: the most throughput
  EXPECT_TRUE(Contains(choice->reason, "adaptive batch: noise scale 1000000000.0 samples; batch 128 -> "))
      << choice->reason;
  chooser.NotHanded();
  // Plan 2 arrives by hand: nothing is judged on it.
  for (std::int64_t step = 11; step <= 40; ++step) EXPECT_FALSE(chooser.Metrics(0, Record(step, 2, 1e9), Known()));
}

}  // namespace
}  // namespace poplar
