// The held-out evaluation (--eval-data): its loss is one device's on every stage and
// plan, it is the training forward's on the same samples, and it changes nothing of the
// training. Real processes on loopback.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

class Eval : public ::testing::Test {
 protected:
  Eval() {
    WriteModelConfig(scratch);
    WriteTokens(scratch, 6000);
    WriteTokens(scratch, 1000, "eval.bin", "a stitch in time saves nine, said one of them");  // 62 samples
  }

  std::vector<std::string> Args(const std::string& plan, const std::string& name, std::vector<std::string> extra) {
    extra.insert(extra.begin(),
                 {"--lr", "1e-3", "--timeout", "60", "--save", name + ".pt", "--metrics", name + ".jsonl"});
    return TrainCommand(scratch, plan, 3, extra);
  }

  // Rank 0's metrics records of run `name`.
  std::vector<nlohmann::json> Records(const std::string& name) {
    std::vector<nlohmann::json> records;
    for (const std::string& line : ReadLines(scratch.path() + "/" + name + ".jsonl")) {
      records.push_back(nlohmann::json::parse(line));
    }
    return records;
  }

  ScratchDir scratch{"poplar_eval"};
};

// 41 of the 62 samples, every 2 steps and after the last: steps 2 and 3. The plans split
// them unevenly (in proportion to 8 and 6 samples of 14, ...), and at stage 3 a rank
// with no samples joins the others' gathers.
TEST_F(Eval, TheLossIsOneDevicesOnEveryStageAndPlan) {
  const std::vector<std::string> eval = {
      "--eval-data", scratch.path() + "/eval.bin", "--eval-every", "2", "--eval-samples", "41"};
  const std::string one = WritePlan(scratch, "one.json", 0, {{14}});
  const JobOutcome reference = RunJob(scratch, 1, Args(one, "reference", eval));
  ASSERT_TRUE(reference.AllSucceeded()) << reference.Describe();
  const std::vector<nlohmann::json> expected = Records("reference");
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_FALSE(expected[0].contains("val_loss")) << expected[0];
  EXPECT_EQ(expected[0]["eval_every"], 2) << "every record says the run evaluates (the head checks the first)";
  ASSERT_TRUE(expected[1].contains("val_loss")) << expected[1];
  ASSERT_TRUE(expected[2].contains("val_loss")) << expected[2];
  // A text the model has not trained on: near log(256) = 5.5 after three steps.
  EXPECT_GT(expected[2]["val_loss"].get<double>(), 3.0);
  EXPECT_LT(expected[2]["val_loss"].get<double>(), 6.0);
  EXPECT_NE(expected[1]["val_loss"], expected[2]["val_loss"]);

  const std::map<std::string, std::pair<int, std::vector<std::vector<int>>>> plans = {
      {"stage0", {0, {{5, 3}, {4, 2}}}},
      {"stage1", {1, {{5, 3}, {2}, {1, 1, 1, 1}}}},
      {"stage2", {2, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}}},
      {"stage3", {3, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}}},
      {"stage2idle", {2, {{5, 5, 4}, {0, 0, 0}}}},
      {"stage3idle", {3, {{5, 5, 4}, {0, 0, 0}}}},
  };
  for (const auto& [name, plan] : plans) {
    SCOPED_TRACE(name);
    const std::string file = WritePlan(scratch, name + ".json", plan.first, plan.second);
    const JobOutcome job = RunJob(scratch, static_cast<int>(plan.second.size()), Args(file, name, eval));
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
    const std::vector<nlohmann::json> actual = Records(name);
    ASSERT_EQ(actual.size(), 3u);
    EXPECT_FALSE(actual[0].contains("val_loss"));
    for (std::size_t i = 1; i < 3; ++i) {
      EXPECT_NEAR(actual[i]["val_loss"].get<double>(), expected[i]["val_loss"].get<double>(), 1e-5) << "step " << i + 1;
    }
    // The evaluation changed nothing of the training.
    const JobOutcome plain = RunJob(scratch, static_cast<int>(plan.second.size()), Args(file, name + "-plain", {}));
    ASSERT_TRUE(plain.AllSucceeded()) << plain.Describe();
    EXPECT_EQ(MaxAbsDifference(ReadStateDict(scratch.path() + "/" + name + ".pt"),
                               ReadStateDict(scratch.path() + "/" + name + "-plain.pt")),
              0.0);
  }
}

// On a token file of exactly one global batch (14 samples), every step trains on the same
// samples, so the loss evaluated on that file after step t is the training loss of step
// t + 1 (computed with the same parameters): the evaluation's forward is the training's,
// in fp32 and in bf16 (measured: equal to the last bit on this machine, both stages).
TEST_F(Eval, OnTheTrainingSamplesItIsTheNextStepsTrainingLoss) {
  WriteTokens(scratch, 14 * 16 + 1);
  const std::vector<std::pair<int, std::string>> cases = {{0, "fp32"}, {3, "fp32"}, {1, "bf16"}, {3, "bf16"}};
  for (const auto& [stage, precision] : cases) {
    SCOPED_TRACE("stage " + std::to_string(stage) + ", " + precision);
    const std::string plan = WritePlan(scratch, "plan.json", stage, {{5, 3}, {4, 2}});
    const JobOutcome job =
        RunJob(scratch, 2,
               Args(plan, "same",
                    {"--eval-data", scratch.path() + "/tokens.bin", "--eval-every", "1", "--precision", precision}));
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
    const std::vector<nlohmann::json> records = Records("same");
    ASSERT_EQ(records.size(), 3u);
    for (std::size_t i = 0; i + 1 < records.size(); ++i) {
      std::cout << "[ " << precision << " stage " << stage << " ] held-out - next loss = "
                << records[i]["val_loss"].get<double>() - records[i + 1]["loss"].get<double>() << "\n";
      EXPECT_NEAR(records[i]["val_loss"].get<double>(), records[i + 1]["loss"].get<double>(), 1e-6)
          << "after step " << i + 1;
    }
  }
}

// A resumed run evaluates at the same steps as the uninterrupted one (every 2 counts
// from step 0, not from the resume), with the same loss: stage 3 on two ranks, stopped
// after step 3 and resumed to step 6, evaluates after steps 4 and 6 (counted from the
// resume, it would be 5 and 6).
TEST_F(Eval, AResumedRunEvaluatesAtTheUninterruptedRunsStepsWithItsLoss) {
  const std::vector<std::string> eval = {"--eval-data", scratch.path() + "/eval.bin", "--eval-every", "2"};
  const std::string plan = WritePlan(scratch, "plan.json", 3, {{5, 3}, {4, 2}});
  const auto steps = [&](const std::string& name, const std::string& count, std::vector<std::string> extra) {
    extra.insert(extra.end(), eval.begin(), eval.end());
    std::vector<std::string> args = Args(plan, name, extra);
    *(std::find(args.begin(), args.end(), "--steps") + 1) = count;
    return args;
  };
  const JobOutcome whole = RunJob(scratch, 2, steps("whole", "6", {}));
  ASSERT_TRUE(whole.AllSucceeded()) << whole.Describe();
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const JobOutcome first = RunJob(scratch, 2, steps("first", "3", {"--checkpoint-dir", checkpoints}));
  ASSERT_TRUE(first.AllSucceeded()) << first.Describe();
  const JobOutcome resumed = RunJob(scratch, 2, steps("resumed", "6", {"--resume", checkpoints}));
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();

  const std::vector<nlohmann::json> expected = Records("whole");
  const std::vector<nlohmann::json> actual = Records("resumed");
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(actual.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const nlohmann::json& want = expected[3 + i];
    ASSERT_EQ(actual[i]["step"], want["step"]);
    ASSERT_EQ(actual[i].contains("val_loss"), want.contains("val_loss")) << "step " << want["step"];
    if (want.contains("val_loss")) {
      EXPECT_NEAR(actual[i]["val_loss"].get<double>(), want["val_loss"].get<double>(), 1e-6) << "step " << want["step"];
    }
  }
  EXPECT_TRUE(actual[0].contains("val_loss")) << "step 4 is due";
  EXPECT_FALSE(actual[1].contains("val_loss")) << "step 5 is not";
}

TEST_F(Eval, MoreSamplesThanTheFileHoldsAreRefusedByName) {
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{14}});
  const JobOutcome job =
      RunJob(scratch, 1, Args(plan, "bad", {"--eval-data", scratch.path() + "/eval.bin", "--eval-samples", "63"}));
  EXPECT_FALSE(job.AllSucceeded());
  EXPECT_TRUE(ContainsAll(job.errors[0], {"--eval-samples", "63 is more than the 62 samples of", "eval.bin"}))
      << job.Describe();
  const JobOutcome orphan = RunJob(scratch, 1, Args(plan, "orphan", {"--eval-every", "2"}));
  EXPECT_FALSE(orphan.AllSucceeded());
  EXPECT_TRUE(ContainsAll(orphan.errors[0], {"--eval-every", "--eval-data"})) << orphan.Describe();
}

}  // namespace
}  // namespace poplar::testing
