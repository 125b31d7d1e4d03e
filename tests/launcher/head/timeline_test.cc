// The timeline and the straggler report (launcher/head/timeline.h) from records given
// here: a track per rank on one time axis, a resumed attempt after the one before, and
// the rank idle least named the straggler of each plan.
#include "launcher/head/timeline.h"

#include <gtest/gtest.h>

#include "test_support.h"

namespace poplar {
namespace {

// A record of `step` starting at `start_s`, `step_s` long, with two micro-batches of
// `compute_s` / 2 each from the step's start and the optimizer after them.
nlohmann::json Record(int rank, int step, int plan, double start_s, double step_s, double compute_s) {
  const double half = compute_s / 2;
  return {{"rank", rank},
          {"step", step},
          {"plan", plan},
          {"start_s", start_s},
          {"step_s", step_s},
          {"compute_s", compute_s},
          {"optimizer_s", 0.001},
          {"samples", 8},
          {"loss", 3.0},
          {"spans",
           {{"micro_batches", {{0.0, half, half, 4}, {half, half, half, 4}}},
            {"optimizer", {compute_s, 0.001}},
            {"loss_all_reduce", {compute_s + 0.001, step_s - compute_s - 0.001}}}}};
}

std::vector<RankRecords> TwoRanks() {
  std::vector<RankRecords> ranks = {{0, "emu-fast", "fast", {}}, {1, "emu-slow", "slow", {}}};
  for (int step = 1; step <= 4; ++step) {
    const double start = 0.1 * (step - 1);
    ranks[0].records.push_back(Record(0, step, 0, start, 0.1, 0.04));  // idle 59%
    ranks[1].records.push_back(Record(1, step, 0, start, 0.1, 0.09));  // idle 9%
  }
  return ranks;
}

std::vector<nlohmann::json> Named(const nlohmann::json& trace, const std::string& prefix, int tid) {
  std::vector<nlohmann::json> found;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X" && event["tid"] == tid && event["name"].get<std::string>().rfind(prefix, 0) == 0) {
      found.push_back(event);
    }
  }
  return found;
}

TEST(Timeline, ATrackPerRankWithItsStepsOnOneClock) {
  const nlohmann::json trace = TimelineTrace("job-7", TwoRanks());
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  bool named = false;
  for (const auto& event : trace["traceEvents"]) {
    if (event["name"] == "thread_name" && event["tid"] == 1) {
      named = event["args"]["name"] == "rank 1: emu-slow on node slow";
    }
  }
  EXPECT_TRUE(named);
  const auto steps = Named(trace, "step ", 1);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[2]["name"], "step 3");
  EXPECT_DOUBLE_EQ(steps[2]["ts"].get<double>(), 0.2e6);  // microseconds
  EXPECT_DOUBLE_EQ(steps[2]["dur"].get<double>(), 0.1e6);
  EXPECT_NEAR(steps[2]["args"]["idle_ms"].get<double>(), 9.0, 1e-9);
  const auto micro_batches = Named(trace, "micro-batch ", 0);
  ASSERT_EQ(micro_batches.size(), 8u);
  EXPECT_EQ(micro_batches[1]["name"], "micro-batch 1 (4 samples)");
  EXPECT_DOUBLE_EQ(micro_batches[1]["ts"].get<double>(), 0.02e6);
  EXPECT_EQ(Named(trace, "optimizer", 0).size(), 4u);
  EXPECT_EQ(Named(trace, "loss all-reduce", 1).size(), 4u);
}

// A resumed attempt's clock starts again: its steps come after the attempt before.
TEST(Timeline, AResumedAttemptFollowsTheOneBefore) {
  std::vector<RankRecords> ranks = TwoRanks();
  for (int step = 3; step <= 4; ++step) {  // the resume went on from step 2
    const double start = 0.1 * (step - 3);
    ranks[0].records.push_back(Record(0, step, 0, start, 0.1, 0.04));
    ranks[1].records.push_back(Record(1, step, 0, start, 0.1, 0.09));
  }
  const auto steps = Named(TimelineTrace("job", ranks), "step ", 1);
  ASSERT_EQ(steps.size(), 6u);
  // The first attempt ended at 0.4 s; the second starts a second later.
  EXPECT_DOUBLE_EQ(steps[4]["ts"].get<double>(), 1.4e6);
  EXPECT_DOUBLE_EQ(steps[5]["ts"].get<double>(), 1.5e6);
  // Records of another worker (no start_s or spans) are left out.
  ranks[0].records.push_back({{"step", 5}, {"step_s", 0.1}});
  EXPECT_EQ(Named(TimelineTrace("job", ranks), "step ", 0).size(), 6u);
}

TEST(StragglerReport, NamesTheRankIdleLeastInEachPlan) {
  std::vector<RankRecords> ranks = TwoRanks();
  // Plan 1 from step 5: the slow rank rests, the fast one holds the step.
  for (int step = 5; step <= 8; ++step) {
    ranks[0].records.push_back(Record(0, step, 1, 0.1 * (step - 1), 0.1, 0.095));
    ranks[1].records.push_back(Record(1, step, 1, 0.1 * (step - 1), 0.1, 0.0));
  }
  const nlohmann::json report = StragglerReport(ranks);
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[0]["plan"], 0);
  EXPECT_EQ(report[0]["steps"], 4);
  EXPECT_EQ(report[0]["straggler"]["rank"], 1);
  EXPECT_EQ(report[0]["straggler"]["device_type"], "emu-slow");
  EXPECT_NEAR(report[0]["straggler"]["idle_share"].get<double>(), 0.09, 1e-9);
  EXPECT_NEAR(report[0]["idle_share"]["0"].get<double>(), 0.59, 1e-9);
  EXPECT_EQ(report[1]["plan"], 1);
  EXPECT_EQ(report[1]["straggler"]["rank"], 0);
  EXPECT_NEAR(report[1]["idle_share"]["1"].get<double>(), 0.99, 1e-9);
  EXPECT_FALSE(report[0].contains("busy")) << "no plan said what the devices compute";
}

TEST(StragglerReport, SetsEachTypesComputeBesideThePlansPrediction) {
  const PredictedBusy predicted = {{0, {{"emu-fast", 0.05}, {"emu-slow", 0.09}, {"emu-absent", 1.0}}}};
  const nlohmann::json report = StragglerReport(TwoRanks(), predicted);
  ASSERT_EQ(report.size(), 1u);
  ASSERT_TRUE(report[0].contains("busy"));
  const nlohmann::json& busy = report[0]["busy"];
  EXPECT_NEAR(busy["emu-fast"]["measured_s"].get<double>(), 0.04, 1e-12);
  EXPECT_NEAR(busy["emu-fast"]["predicted_s"].get<double>(), 0.05, 1e-12);
  EXPECT_NEAR(busy["emu-fast"]["ratio"].get<double>(), 0.8, 1e-9);
  EXPECT_NEAR(busy["emu-slow"]["ratio"].get<double>(), 1.0, 1e-9);
  EXPECT_FALSE(busy.contains("emu-absent")) << "a type no rank trained on";
}

TEST(StragglerReport, ReadsThePredictionsOfEveryPlanOfTheRunDirectory) {
  testing::ScratchDir run("poplar_predicted_busy");
  run.Write("plan.json", R"({"device_types": [{"type": "emu-fast", "busy_s": 0.05}, {"type": "emu-slow"}]})");
  run.Write("plans/plan-1.json", R"({"device_types": [{"type": "emu-fast", "busy_s": 0.07}]})");
  run.Write("plans/plan-2.json", "{not json");
  run.Write("plans/plan-4.json", R"({"device_types": [{"type": "emu-fast", "busy_s": 0.09}]})");
  const PredictedBusy predicted = ReadPredictedBusy(run.path());
  ASSERT_EQ(predicted.size(), 2u);
  EXPECT_EQ(predicted.at(0).size(), 1u) << "a type without busy_s says nothing";
  EXPECT_DOUBLE_EQ(predicted.at(0).at("emu-fast"), 0.05);
  EXPECT_DOUBLE_EQ(predicted.at(1).at("emu-fast"), 0.07);
}

}  // namespace
}  // namespace poplar
