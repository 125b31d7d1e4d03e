// The Rebalancer (launcher/head/rebalancer.h): a device type that computes persistently
// slower than its profile gets a plan that gives it less; noise, and a device as slow as
// the plan already knows, change nothing; a device that recovers gets its work back.
#include "launcher/head/rebalancer.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "planner/cluster/cluster_profiles.h"
#include "planner/search/plan_file.h"
#include "planner/search/planner.h"
#include "test_support.h"

namespace poplar {
namespace {

using ::poplar::testing::Contains;

class RebalancerTest : public ::testing::Test {
 protected:
  // Four V100s and four T4s (configs/v100-and-t4.yaml), planned from their profiles.
  RebalancerTest()
      : cluster_(LoadClusterFile(POPLAR_SOURCE_DIR "/configs/v100-and-t4.yaml")),
        profiles_(LoadClusterProfiles(cluster_, cluster_.profiles_dir)),
        plan_(ParseWorkerPlan(PlanToJson(cluster_, profiles_, MakePlan(cluster_, profiles_, Policy::kPoplar)).dump(),
                              "plan.json")) {}

  // Every rank's record of `step`, trained by `plan` (numbered `number`), each rank
  // computing `factor(rank)` times what the profiles predict; the last proposal made.
  std::optional<Rebalance> Step(Rebalancer& rebalancer, int step, int number, const WorkerPlan& plan,
                                const std::function<double(int)>& factor) {
    const std::vector<double> predicted = PredictRankCompute(cluster_, profiles_, plan);
    std::optional<Rebalance> proposal;
    for (int rank = 0; rank < plan.WorldSize(); ++rank) {
      const nlohmann::json record = {
          {"step", step}, {"rank", rank}, {"plan", number}, {"compute_s", predicted[rank] * factor(rank)}};
      if (auto made = rebalancer.Metrics(rank, record)) proposal = made;
    }
    return proposal;
  }

  int Samples(const WorkerPlan& plan, const std::string& type) const {
    int samples = 0;
    for (int rank = 0; rank < plan.WorldSize(); ++rank) {
      if (plan.placement[rank].device_type == type) samples += static_cast<int>(plan.RankSamples(rank));
    }
    return samples;
  }

  ClusterSpec cluster_;
  std::map<std::string, DeviceProfile> profiles_;
  WorkerPlan plan_;
};

const auto kAsProfiled = [](int) { return 1.0; };

TEST_F(RebalancerTest, ASlowerTypeGetsLessWorkOnceAndTheSwitchHolds) {
  Rebalancer rebalancer(cluster_, profiles_, plan_, {});
  const auto t4_slow = [&](int rank) { return plan_.placement[rank].device_type == "T4-16GB" ? 3.0 : 1.0; };
  int step = 1;
  for (; step <= 9; ++step) ASSERT_FALSE(Step(rebalancer, step, 0, plan_, kAsProfiled)) << step;
  // The T4s slow down at step 10; the next full window (steps 10-17) shows it, and the
  // one after (18-25) confirms it.
  std::optional<Rebalance> proposal;
  for (; step <= 25 && !proposal; ++step) proposal = Step(rebalancer, step, 0, plan_, t4_slow);
  ASSERT_TRUE(proposal) << "no proposal by step 25";
  EXPECT_EQ(step - 1, 25);
  EXPECT_TRUE(Contains(proposal->reason, "T4-16GB 3.00x")) << proposal->reason;
  EXPECT_TRUE(Contains(proposal->reason, "V100-16GB 1.00x")) << proposal->reason;
  const WorkerPlan rebalanced = ParseWorkerPlan(proposal->plan_text, "rebalanced.json");
  EXPECT_NO_THROW(RequireSwitchable(plan_, rebalanced));
  EXPECT_LT(Samples(rebalanced, "T4-16GB"), Samples(plan_, "T4-16GB"));
  EXPECT_DOUBLE_EQ(rebalancer.corrections().at("T4-16GB"), 3.0);

  // Nothing is measured until the records name the plan handed; then the T4s, as slow
  // as the corrected profiles say, give no reason to switch again.
  rebalancer.Handed(1);
  ASSERT_FALSE(Step(rebalancer, step++, 0, plan_, t4_slow));
  for (int end = step + 60; step < end; ++step) {
    ASSERT_FALSE(Step(rebalancer, step, 1, rebalanced, t4_slow)) << "flapped at step " << step;
  }
  // They recover: the work goes back.
  std::optional<Rebalance> back;
  for (int end = step + 30; step < end && !back; ++step) back = Step(rebalancer, step, 1, rebalanced, kAsProfiled);
  ASSERT_TRUE(back);
  EXPECT_EQ(Samples(ParseWorkerPlan(back->plan_text, "back.json"), "T4-16GB"), Samples(plan_, "T4-16GB"));
}

TEST_F(RebalancerTest, NoiseWithinTheThresholdProposesNothing) {
  Rebalancer rebalancer(cluster_, profiles_, plan_, {});
  std::mt19937 random(7);
  std::uniform_real_distribution<double> noise(0.85, 1.15);
  for (int step = 1; step <= 300; ++step) {
    ASSERT_FALSE(Step(rebalancer, step, 0, plan_, [&](int) { return noise(random); })) << "step " << step;
  }
  // A slowdown every device shares (the machine, not one device) moves no work either.
  for (int step = 301; step <= 400; ++step) {
    ASSERT_FALSE(Step(rebalancer, step, 0, plan_, [](int) { return 1.8; })) << "step " << step;
  }
  ASSERT_FALSE(rebalancer.last_judgement().is_null());
  EXPECT_TRUE(Contains(rebalancer.last_judgement()["outcome"].get<std::string>(), "too little to gain"))
      << rebalancer.last_judgement();
}

// One window's reading, unconfirmed by the next (a warm-up, a neighbour's burst), moves
// nothing.
TEST_F(RebalancerTest, AReadingTheNextWindowDoesNotConfirmMovesNothing) {
  Rebalancer rebalancer(cluster_, profiles_, plan_, {});
  const auto t4_slow = [&](int rank) { return plan_.placement[rank].device_type == "T4-16GB" ? 3.0 : 1.0; };
  for (int step = 1; step <= 100; ++step) {
    // Steps 2-9 slow, then as profiled; later, every other window slow.
    const bool slow = step <= 9 || (step > 41 && ((step - 2) / 8) % 2 == 1);
    ASSERT_FALSE(Step(rebalancer, step, 0, plan_, [&](int rank) { return slow ? t4_slow(rank) : 1.0; }))
        << "step " << step;
  }
  EXPECT_DOUBLE_EQ(rebalancer.corrections().at("T4-16GB"), 1.0);
}

// A load that grows: the T4s read 2x their profile in one window and 3x in the next.
// Two windows off the same way confirm the change, at their mean, and the T4s get less
// work at once rather than after the drift stops.
TEST_F(RebalancerTest, ASpeedStillDriftingIsFollowed) {
  Rebalancer rebalancer(cluster_, profiles_, plan_, {});
  const auto t4 = [&](double factor) {
    return [this, factor](int rank) { return plan_.placement[rank].device_type == "T4-16GB" ? factor : 1.0; };
  };
  std::optional<Rebalance> proposal;
  int step = 1;
  for (; step <= 9; ++step) ASSERT_FALSE(Step(rebalancer, step, 0, plan_, kAsProfiled)) << step;
  for (; step <= 17; ++step) ASSERT_FALSE(Step(rebalancer, step, 0, plan_, t4(2.0))) << step;
  for (; step <= 25 && !proposal; ++step) proposal = Step(rebalancer, step, 0, plan_, t4(3.0));
  ASSERT_TRUE(proposal) << rebalancer.last_judgement().dump(2);
  EXPECT_EQ(step - 1, 25);
  EXPECT_DOUBLE_EQ(rebalancer.corrections().at("T4-16GB"), 2.5);
  EXPECT_LT(Samples(ParseWorkerPlan(proposal->plan_text, "rebalanced.json"), "T4-16GB"), Samples(plan_, "T4-16GB"));
}

// A reading off one way, then the other (a burst, then a lull), moves nothing.
TEST_F(RebalancerTest, WindowsOffOppositeWaysMoveNothing) {
  Rebalancer rebalancer(cluster_, profiles_, plan_, {});
  for (int step = 1; step <= 100; ++step) {
    const double factor = step <= 9 ? 1.0 : (((step - 2) / 8) % 2 == 0 ? 2.0 : 0.5);
    ASSERT_FALSE(Step(rebalancer, step, 0, plan_,
                      [&](int rank) { return plan_.placement[rank].device_type == "T4-16GB" ? factor : 1.0; }))
        << "step " << step;
  }
  EXPECT_DOUBLE_EQ(rebalancer.corrections().at("T4-16GB"), 1.0);
}

// The V100s slow down 1.5x from step 10, the T4s 3x from step 18: at step 25 the V100s'
// reading is confirmed and the T4s' only seen once. A plan then would give the T4s more
// work just as they slow down; nothing is proposed until both are known (step 33), and
// that plan gives the T4s less.
TEST_F(RebalancerTest, NothingIsProposedWhileATypesReadingAwaitsConfirmation) {
  Rebalancer rebalancer(cluster_, profiles_, plan_, {});
  std::vector<nlohmann::ordered_json> judgements;
  rebalancer.RecordJudgements([&](const nlohmann::ordered_json& judgement) { judgements.push_back(judgement); });
  const auto factor = [&](int step) {
    return [this, step](int rank) {
      if (plan_.placement[rank].device_type == "T4-16GB") return step >= 18 ? 3.0 : 1.0;
      return step >= 10 ? 1.5 : 1.0;
    };
  };
  std::optional<Rebalance> proposal;
  int step = 1;
  for (; step <= 33 && !proposal; ++step) proposal = Step(rebalancer, step, 0, plan_, factor(step));
  ASSERT_TRUE(proposal) << "no proposal by step 33";
  EXPECT_EQ(step - 1, 33);
  EXPECT_DOUBLE_EQ(rebalancer.corrections().at("V100-16GB"), 1.5);
  EXPECT_DOUBLE_EQ(rebalancer.corrections().at("T4-16GB"), 3.0);
  EXPECT_LT(Samples(ParseWorkerPlan(proposal->plan_text, "rebalanced.json"), "T4-16GB"), Samples(plan_, "T4-16GB"));
  // Every judgement is on record, with why nothing came of it.
  ASSERT_EQ(judgements.size(), 4u);  // steps 9, 17, 25, 33
  EXPECT_EQ(judgements[2]["step"], 25);
  EXPECT_DOUBLE_EQ(judgements[2]["readings"]["T4-16GB"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(judgements[2]["corrections"]["V100-16GB"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(judgements[2]["awaiting"]["T4-16GB"].get<double>(), 3.0);
  EXPECT_EQ(judgements[2]["outcome"], "a reading awaits its confirmation");
  EXPECT_TRUE(Contains(judgements[3]["outcome"].get<std::string>(), "proposed: the running plan takes"))
      << judgements[3];
  EXPECT_TRUE(judgements[3]["awaiting"].empty());
}

TEST_F(RebalancerTest, NoSwitchWhereNoStepIsLeftToGainOn) {
  RebalanceOptions options;
  options.last_step = 25;  // confirmed at step 25: no step left to gain on
  Rebalancer rebalancer(cluster_, profiles_, plan_, options);
  const auto t4_slow = [&](int rank) { return plan_.placement[rank].device_type == "T4-16GB" ? 3.0 : 1.0; };
  for (int step = 1; step <= 25; ++step) {
    ASSERT_FALSE(Step(rebalancer, step, 0, plan_, [&](int rank) { return step < 10 ? 1.0 : t4_slow(rank); })) << step;
  }
}

}  // namespace
}  // namespace poplar
