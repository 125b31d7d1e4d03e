// Plan switches (launcher/worker/plan_switches.h): plans that replace the running one
// between steps change who computes which samples, never the training. Real processes
// on loopback, against one device training the same global batches.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/formats/worker_plan.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

namespace fs = std::filesystem;

struct Switches {
  std::string name;
  int stage;
  // Global batch 14 in every plan: the one --plan names, then plan-1.json and
  // plan-3.json of the switch folder (plan-2.json is one the run cannot take).
  std::vector<std::vector<int>> first, second, third;
  std::vector<double> state_shares = {};
};

std::ostream& operator<<(std::ostream& out, const Switches& switches) { return out << switches.name; }

class PlanSwitch : public ::testing::TestWithParam<Switches> {};

constexpr int kSteps = 4;

std::vector<std::string> Args(const ScratchDir& scratch, const std::string& plan, const std::string& name,
                              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args =
      TrainCommand(scratch, plan, kSteps,
                   {"--save", name + ".pt", "--metrics", name + "-{rank}.jsonl", "--lr", "1e-3", "--timeout", "60"});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Every plan of the switch folder is there from the start: rank 0 finds plan-1 at step
// 1's end, and plan-2 (refused) then plan-3 at step 2's: steps 1, 2 and 3-4 train with
// plans 0, 1 and 3.
TEST_P(PlanSwitch, ChangesNothingOfTheTraining) {
  const Switches& switches = GetParam();
  ScratchDir scratch("poplar_plan_switch");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);

  const std::string one = WritePlan(scratch, "one.json", 0, {{14}});
  const JobOutcome reference = RunJob(scratch, 1, Args(scratch, one, "reference"));
  ASSERT_TRUE(reference.AllSucceeded()) << reference.Describe();

  const std::string folder = scratch.path() + "/switches";
  fs::create_directories(folder);
  const std::string first = WritePlan(scratch, "first.json", switches.stage, switches.first, switches.state_shares);
  fs::rename(WritePlan(scratch, "p1.json", switches.stage, switches.second, switches.state_shares),
             folder + "/plan-1.json");
  // Another stage: refused, training goes on.
  fs::rename(WritePlan(scratch, "p2.json", switches.stage == 3 ? 2 : 3, {{7, 0}, {0, 7}}), folder + "/plan-2.json");
  fs::rename(WritePlan(scratch, "p3.json", switches.stage, switches.third, switches.state_shares),
             folder + "/plan-3.json");
  const int world = static_cast<int>(switches.first.size());
  const JobOutcome job = RunJob(scratch, world, Args(scratch, first, "ranks", {"--plan-switches", folder}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  EXPECT_TRUE(Contains(job.errors[0], "plan switch refused")) << job.errors[0];
  EXPECT_TRUE(Contains(job.errors[0], "plan-2.json")) << job.errors[0];

  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/reference.pt"), ReadStateDict(scratch.path() + "/ranks.pt"));
  std::cout << "[ stage " << switches.stage << " ] max |difference| = " << difference << "\n";
  EXPECT_LT(difference, 1e-5);

  const auto expected = ReadLines(scratch.path() + "/reference-0.jsonl");
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps));
  const std::vector<std::vector<std::vector<int>>> plans = {switches.first, switches.second, switches.third,
                                                            switches.third};
  const std::vector<int> numbers = {0, 1, 3, 3};
  for (int rank = 0; rank < world; ++rank) {
    const auto actual = ReadLines(scratch.path() + "/ranks-" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(actual.size(), expected.size()) << "rank " << rank;
    for (std::size_t i = 0; i < actual.size(); ++i) {
      const auto a = nlohmann::json::parse(expected[i]), b = nlohmann::json::parse(actual[i]);
      EXPECT_NEAR(b["loss"].get<double>(), a["loss"].get<double>(), 1e-5) << "step " << i + 1;
      EXPECT_EQ(b["plan"], numbers[i]) << "rank " << rank << " step " << i + 1;
      int samples = 0;
      for (int size : plans[i][rank]) samples += size;
      EXPECT_EQ(b["samples"], samples) << "rank " << rank << " step " << i + 1;
      // The steps that received a plan say so, with what receiving it took.
      EXPECT_EQ(b.contains("next_plan"), i == 0 || i == 1) << "step " << i + 1;
      if (b.contains("next_plan")) {
        EXPECT_GE(b["switch_s"].get<double>(), 0.0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryStage, PlanSwitch,
    ::testing::Values(Switches{"Stage0", 0, {{5, 3}, {4, 2}}, {{1}, {7, 6}}, {{5, 5}, {1, 1, 1, 1}}},
                      Switches{"Stage1", 1, {{5, 3}, {4, 2}}, {{1}, {7, 6}}, {{5, 5}, {1, 1, 1, 1}}},
                      // A rank drops to no samples, and back.
                      Switches{"Stage2", 2, {{5, 3, 0}, {2, 2, 2}}, {{7, 7}, {0, 0}}, {{1, 1, 1, 1}, {2, 2, 3, 3}}},
                      Switches{"Stage3", 3, {{5, 3, 0}, {2, 2, 2}}, {{7, 7}, {0, 0}}, {{1, 1, 1, 1}, {2, 2, 3, 3}}},
                      // Uneven state shares stay as they are, a rank holding none.
                      Switches{"Stage3Shares",
                               3,
                               {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}},
                               {{0, 0}, {7, 7}, {0, 0}},
                               {{1, 1}, {2, 2}, {4, 4}},
                               {0, 2, 1}}),
    [](const ::testing::TestParamInfo<Switches>& info) { return info.param.name; });

// An adaptive batch (--batch-min, --batch-max): plan switches change the global batch,
// and the training equals one device's trained on the same sequence of batches, the
// samples following each other (each batch starts where the last ended) and the learning
// rate following the square-root rule. Batches 14, 20, 8, 8.
class AdaptiveBatch : public ::testing::TestWithParam<int> {};

TEST_P(AdaptiveBatch, EqualsOneDeviceTrainingTheSameBatchSequence) {
  const int stage = GetParam();
  ScratchDir scratch("poplar_adaptive_batch");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  const auto run = [&](const std::string& name, const std::vector<std::vector<std::vector<int>>>& plans) {
    const std::string folder = scratch.path() + "/" + name + "-switches";
    fs::create_directories(folder);
    const int plan_stage = plans[0].size() == 1 ? 0 : stage;
    for (std::size_t i = 1; i < plans.size(); ++i) {
      fs::rename(WritePlan(scratch, name + "-p.json", plan_stage, plans[i]),
                 folder + "/plan-" + std::to_string(i) + ".json");
    }
    const std::string first = WritePlan(scratch, name + ".json", plan_stage, plans[0]);
    return RunJob(scratch, static_cast<int>(plans[0].size()),
                  Args(scratch, first, name, {"--plan-switches", folder, "--batch-min", "6", "--batch-max", "24"}));
  };
  const JobOutcome reference = run("reference", {{{14}}, {{20}}, {{8}}});
  ASSERT_TRUE(reference.AllSucceeded()) << reference.Describe();
  const JobOutcome job = run("ranks", {{{5, 3}, {4, 2}}, {{10}, {10}}, {{3}, {5}}});
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();

  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/reference.pt"), ReadStateDict(scratch.path() + "/ranks.pt"));
  std::cout << "[ stage " << stage << " ] max |difference| = " << difference << "\n";
  EXPECT_LT(difference, 1e-5);
  const auto expected = ReadLines(scratch.path() + "/reference-0.jsonl");
  const auto actual = ReadLines(scratch.path() + "/ranks-0.jsonl");
  ASSERT_EQ(actual.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(expected.size(), actual.size());
  const std::vector<int> batches = {14, 20, 8, 8};
  int first_sample = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const auto a = nlohmann::json::parse(expected[i]), b = nlohmann::json::parse(actual[i]);
    EXPECT_EQ(b["global_batch"], batches[i]) << "step " << i + 1;
    // Each batch starts where the last ended: no sample skipped or trained twice.
    EXPECT_EQ(b["first_sample"], first_sample) << "step " << i + 1;
    EXPECT_EQ(a["first_sample"], first_sample) << "step " << i + 1;
    first_sample += batches[i];
    EXPECT_NEAR(b["loss"].get<double>(), a["loss"].get<double>(), 1e-5) << "step " << i + 1;
    // The square-root rule against the run's first batch, 14 (a constant schedule).
    EXPECT_NEAR(b["lr"].get<double>(), 1e-3 * std::sqrt(batches[i] / 14.0), 1e-12) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryStage, AdaptiveBatch, ::testing::Values(0, 1, 2, 3));

// A checkpoint of an adaptive run records its batch sequence; a resume goes on with it:
// the next batch starts where the sequence ended and the learning rate keeps the run's
// first batch as its base, whatever batch the resuming plan trains. Batches 14 and 20,
// a checkpoint after step 2, then 8 and 8 in a resumed run equal the run that never
// stopped.
TEST(AdaptiveBatch, AResumeGoesOnWithTheCheckpointsBatchSequence) {
  ScratchDir scratch("poplar_adaptive_resume");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  const std::vector<std::string> bounds = {"--batch-min", "6", "--batch-max", "24"};
  const std::string folder = scratch.path() + "/switches";
  fs::create_directories(folder);
  fs::rename(WritePlan(scratch, "p.json", 2, {{10}, {10}}), folder + "/plan-1.json");
  fs::rename(WritePlan(scratch, "p.json", 2, {{3}, {5}}), folder + "/plan-2.json");
  std::vector<std::string> flags = {"--plan-switches",    folder, "--checkpoint-dir", scratch.path() + "/checkpoints",
                                    "--checkpoint-every", "2"};
  flags.insert(flags.end(), bounds.begin(), bounds.end());
  const std::string first = WritePlan(scratch, "first.json", 2, {{5, 3}, {4, 2}});
  const JobOutcome whole = RunJob(scratch, 2, Args(scratch, first, "whole", flags));
  ASSERT_TRUE(whole.AllSucceeded()) << whole.Describe();
  const std::string step2 = scratch.path() + "/checkpoints/step-00000002";
  const std::string meta = ReadTextFile(step2 + "/meta.json");
  EXPECT_TRUE(Contains(meta, "\"samples_done\": 34")) << meta;

  // The resumed run starts on a plan of batch 8, another split of it.
  std::vector<std::string> resume = {"--resume", step2};
  resume.insert(resume.end(), bounds.begin(), bounds.end());
  const std::string eight = WritePlan(scratch, "eight.json", 2, {{1, 1}, {2, 4}});
  const JobOutcome resumed = RunJob(scratch, 2, Args(scratch, eight, "resumed", resume));
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
  EXPECT_FALSE(Contains(resumed.errors[0], "otherwise than the run that wrote it")) << resumed.errors[0];
  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt"));
  std::cout << "max |difference| = " << difference << "\n";
  EXPECT_LT(difference, 1e-5);
  const auto lines = ReadLines(scratch.path() + "/resumed-0.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto record = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(record["global_batch"], 8);
    EXPECT_EQ(record["first_sample"], 34 + 8 * static_cast<int>(i));
    EXPECT_NEAR(record["lr"].get<double>(), 1e-3 * std::sqrt(8 / 14.0), 1e-12);
  }
}

TEST(AdaptiveBatch, BoundsAreCheckedBeforeTheRendezvous) {
  ScratchDir scratch("poplar_adaptive_batch_bounds");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{14}});
  const auto refusal = [&](const std::vector<std::string>& flags) {
    const JobOutcome job = RunJob(scratch, 1, Args(scratch, plan, "bounds", flags));
    EXPECT_EQ(job.exit_codes[0], flags.size() == 2 && flags[0] == "--batch-max" ? 2 : 1);
    return job.errors[0];
  };
  EXPECT_TRUE(Contains(refusal({"--batch-min", "6"}), "--batch-min: needs --batch-max"));
  EXPECT_TRUE(Contains(refusal({"--batch-min", "16", "--batch-max", "24"}), "global_batch: is 14, outside"));
  EXPECT_TRUE(Contains(refusal({"--batch-min", "12", "--batch-max", "8"}), "--batch-max: 8 is below --batch-min 12"));
  EXPECT_TRUE(Contains(refusal({"--batch-max", "8"}), "--batch-min"));
}

// A switch is refused by the plan's own rules, in words that name the file and the key.
TEST(PlanSwitch, RefusesWhatARunningJobCannotChange) {
  // (planner/formats/worker_plan.h's RequireSwitchable, as the agent and worker use it.)
  ScratchDir scratch("poplar_plan_switch_refusals");
  const auto plan = [&](const std::string& name, int stage, const std::vector<std::vector<int>>& ranks,
                        const std::vector<double>& shares = {}) {
    return LoadWorkerPlan(WritePlan(scratch, name, stage, ranks, shares));
  };
  const WorkerPlan running = plan("running.json", 2, {{4, 4}, {3, 3}});
  EXPECT_NO_THROW(RequireSwitchable(running, plan("ok.json", 2, {{8, 6}, {0, 0}})));
  const auto refusal = [&](const WorkerPlan& next) {
    try {
      RequireSwitchable(running, next);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_TRUE(Contains(refusal(plan("stage.json", 3, {{4, 4}, {3, 3}})),
                       "stage.json: stage: is 3 but the running "
                       "job trains at ZeRO stage 2"));
  EXPECT_TRUE(Contains(refusal(plan("batch.json", 2, {{4, 4}, {3, 4}})), "global_batch"));
  EXPECT_TRUE(Contains(refusal(plan("ranks.json", 2, {{4, 4}, {3, 3}, {0, 0}})), "has 3 ranks"));
  EXPECT_TRUE(Contains(refusal(plan("shares.json", 2, {{4, 4}, {3, 3}}, {1, 3})), "state_share"));
}

// A plan handed to rank 0 (HandPlanSwitch, as the agent and `poplar launch --slurm` hand
// one) is written whole where rank 0 reads it and announced with its number and reason;
// one the running job cannot take writes nothing.
TEST(PlanSwitch, AHandedPlanIsWrittenForRankZeroOrNothingIs) {
  ScratchDir scratch("poplar_plan_switch_hand");
  const WorkerPlan running = LoadWorkerPlan(WritePlan(scratch, "running.json", 2, {{4, 4}, {3, 3}}));
  const std::string plans = scratch.path() + "/plans";
  std::filesystem::create_directories(plans);
  const std::string next = ReadWholeFile(WritePlan(scratch, "next.json", 2, {{8, 6}, {0, 0}}));
  const auto announced = nlohmann::json::parse(HandPlanSwitch(plans, 3, running, next, "rebalanced", "the new plan"));
  EXPECT_EQ(announced["number"], 3);
  EXPECT_EQ(announced["reason"], "rebalanced");
  EXPECT_EQ(announced["plan"], nlohmann::json::parse(next));
  EXPECT_EQ(ReadWholeFile(plans + "/plan-3.json"), next);
  const std::string stage = ReadWholeFile(WritePlan(scratch, "stage.json", 3, {{4, 4}, {3, 3}}));
  try {
    HandPlanSwitch(plans, 4, running, stage, "by hand", "the new plan");
    ADD_FAILURE() << "a plan at another stage was handed";
  } catch (const InputError& error) {
    EXPECT_TRUE(Contains(error.what(), "the new plan: stage: is 3")) << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(plans + "/plan-4.json"));
}

}  // namespace
}  // namespace poplar::testing
