// Each step's record places it on the job's clock (start_s, the same instant on every
// rank to a collective's latency) and says where its time went (spans): the timeline of
// `poplar launch --timeline` (launcher/head/timeline.h) is drawn from them.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

TEST(StepSpans, PlaceEveryRanksStepsOnOneClock) {
  ScratchDir scratch("poplar_step_spans");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  // Rank 1 computes three times as many samples: rank 0 waits for it in every step.
  const std::string plan = WritePlan(scratch, "plan.json", 2, {{2, 2}, {6, 6}});
  const JobOutcome job = RunJob(scratch, 2, TrainCommand(scratch, plan, 4, {"--metrics", "m-{rank}.jsonl"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  std::vector<std::vector<nlohmann::json>> records(2);
  for (int rank = 0; rank < 2; ++rank) {
    for (const std::string& line : ReadLines(scratch.path() + "/m-" + std::to_string(rank) + ".jsonl")) {
      records[rank].push_back(nlohmann::json::parse(line));
    }
    ASSERT_EQ(records[rank].size(), 4u);
  }
  for (int rank = 0; rank < 2; ++rank) {
    double last_end = 0;
    for (const auto& record : records[rank]) {
      const double start = record["start_s"], step_s = record["step_s"];
      EXPECT_GE(start, last_end - 1e-6) << record.dump();  // steps follow each other
      last_end = start + step_s;
      const auto& spans = record["spans"];
      ASSERT_EQ(spans["micro_batches"].size(), 2u) << record.dump();
      double compute = 0, previous_end = 0;
      for (const auto& span : spans["micro_batches"]) {
        EXPECT_GE(span[0].get<double>(), previous_end - 1e-9);
        EXPECT_LE(span[2].get<double>(), span[1].get<double>() + 1e-6) << "compute within the wall time";
        EXPECT_EQ(span[3], rank == 0 ? 2 : 6);
        previous_end = span[0].get<double>() + span[1].get<double>();
        compute += span[2].get<double>();
      }
      EXPECT_NEAR(compute, record["compute_s"].get<double>(), 1e-9);
      for (const char* key : {"optimizer", "loss_all_reduce"}) {
        EXPECT_GE(spans[key][0].get<double>(), previous_end - 1e-9) << key;
        EXPECT_LE(spans[key][0].get<double>() + spans[key][1].get<double>(), step_s + 1e-6) << key;
        previous_end = spans[key][0].get<double>() + spans[key][1].get<double>();
      }
    }
  }
  // The ranks' steps end together (the loss all-reduce ends every step), on one clock:
  // each step's end on rank 0 within 50 ms of rank 1's (a loaded machine's scheduling).
  for (std::size_t i = 1; i < 4; ++i) {
    const auto end = [&](int rank) {
      const auto& r = records[rank][i];
      return r["start_s"].get<double>() + r["spans"]["loss_all_reduce"][0].get<double>() +
             r["spans"]["loss_all_reduce"][1].get<double>();
    };
    EXPECT_NEAR(end(0), end(1), 0.05) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace poplar::testing
