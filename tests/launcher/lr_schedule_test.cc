// The learning-rate schedule (planner/formats/lr_schedule.h) in real training: the rate each
// step's AdamW update takes, and a resumed run going on at the uninterrupted run's
// rates on another plan. Real processes on loopback; the formula itself is checked in
// planner_tests, and against PyTorch's schedulers by scripts/check-against-pytorch.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

class Schedule : public ::testing::Test {
 protected:
  Schedule() {
    WriteModelConfig(scratch);
    WriteTokens(scratch, 6000);
  }
  std::vector<std::string> Args(const std::string& plan, int steps, std::vector<std::string> extra) const {
    extra.insert(extra.begin(), {"--timeout", "60"});
    return TrainCommand(scratch, plan, steps, extra);
  }
  StateDict Saved(const std::string& name) const { return ReadStateDict(scratch.path() + "/" + name); }
  // The "lr" of each metrics record in `name`, in step order.
  std::vector<double> Rates(const std::string& name) const {
    std::vector<double> rates;
    for (const std::string& line : ReadLines(scratch.path() + "/" + name)) {
      rates.push_back(nlohmann::json::parse(line)["lr"].get<double>());
    }
    return rates;
  }
  ScratchDir scratch{"poplar_lr_schedule"};
};

// The first of 4 warm-up steps at 1e-3 is the step of a constant 2.5e-4, to the bit
// (the decoupled weight decay takes the step's rate too); at 1e-3 it is not.
TEST_F(Schedule, AWarmUpsFirstStepUpdatesAtItsFractionOfTheRate) {
  const std::string plan = WritePlan(scratch, "plan.json", 1, {{6}});
  for (const auto& [save, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"warm.pt", {"--lr", "1e-3", "--warmup-steps", "4"}},
           {"quarter.pt", {"--lr", "2.5e-4"}},
           {"full.pt", {"--lr", "1e-3"}}}) {
    std::vector<std::string> args = Args(plan, 1, flags);
    args.insert(args.end(), {"--save", save});
    const JobOutcome job = RunJob(scratch, 1, args);
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  }
  EXPECT_EQ(MaxAbsDifference(Saved("warm.pt"), Saved("quarter.pt")), 0.0);
  EXPECT_GT(MaxAbsDifference(Saved("warm.pt"), Saved("full.pt")), 1e-4);
}

// Warm-up over 2 steps, then a cosine to 1e-4 at step 6 (T = 3): a run stopped after
// step 3 and resumed on 3 ranks at stage 3 takes the rates of steps 4 and 5, not a
// schedule started afresh, and ends where the uninterrupted 2-rank run ends.
TEST_F(Schedule, AResumedRunGoesOnAtTheRatesOfTheUninterruptedOne) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{5, 3}, {4, 2}});
  const std::string three = WritePlan(scratch, "three.json", 3, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}});
  const std::vector<std::string> schedule = {"--lr",          "1e-3", "--warmup-steps", "2",   "--lr-decay", "cosine",
                                             "--decay-steps", "5",    "--min-lr",       "1e-4"};
  const auto with = [&](std::vector<std::string> args, std::vector<std::string> extra) {
    args.insert(args.end(), schedule.begin(), schedule.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::string checkpoints = scratch.path() + "/checkpoints";
  for (const auto& [world, args] : std::vector<std::pair<int, std::vector<std::string>>>{
           {2, with(Args(two, 5, {}), {"--save", "whole.pt", "--metrics", "whole.jsonl"})},
           {2, with(Args(two, 3, {}), {"--checkpoint-dir", checkpoints})},
           {3, with(Args(three, 5, {}),
                    {"--resume", checkpoints, "--save", "resumed.pt", "--metrics", "resumed.jsonl"})}}) {
    const JobOutcome job = RunJob(scratch, world, args);
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  }
  // lr (e + 1) / W while warming up; then 1e-4 + 9e-4 (1 + cos(pi t / 3)) / 2, t = e - 2.
  const std::vector<double> expected = {5e-4, 1e-3, 1e-3, 7.75e-4, 3.25e-4};
  const std::vector<double> whole = Rates("whole.jsonl");
  ASSERT_EQ(whole.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(whole[i], expected[i], 1e-12) << "step " << i + 1;
  const std::vector<double> resumed = Rates("resumed.jsonl");
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_NEAR(resumed[0], expected[3], 1e-12);
  EXPECT_NEAR(resumed[1], expected[4], 1e-12);
  const double difference = MaxAbsDifference(Saved("whole.pt"), Saved("resumed.pt"));
  std::cout << "[ scheduled, resumed 2 ranks stage 1 -> 3 ranks stage 3 ] max |difference| = " << difference << "\n";
  EXPECT_LT(difference, 1e-5);
}

}  // namespace
}  // namespace poplar::testing
