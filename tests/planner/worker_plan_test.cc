// The worker's view of a plan file, and the placement the head and agents read from it.
#include "planner/formats/worker_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/base/input_error.h"

namespace poplar {
namespace {

TEST(WorkerPlan, KeepsEachRanksPlacementByRankNumber) {
  const WorkerPlan plan = ParseWorkerPlan(R"({"stage": 0, "global_batch": 12, "ranks": [
      {"rank": 1, "node": "b", "host": "10.0.0.2", "device_type": "T4-16GB", "micro_batches": [4]},
      {"rank": 0, "node": "a", "host": "10.0.0.1", "device_type": "V100-16GB", "micro_batches": [8]}]})",
                                          "plan.json");
  ASSERT_EQ(plan.placement.size(), 2u);
  EXPECT_EQ(plan.placement[0].node, "a");
  EXPECT_EQ(plan.placement[0].host, "10.0.0.1");
  EXPECT_EQ(plan.placement[1].device_type, "T4-16GB");
  EXPECT_EQ(plan.micro_batches[0], std::vector<int>{8});
}

TEST(WorkerPlan, APlanWithoutPlacementHasEmptyOnes) {
  const WorkerPlan plan =
      ParseWorkerPlan(R"({"stage": 0, "global_batch": 4, "ranks": [{"rank": 0, "micro_batches": [4]}]})", "p.json");
  ASSERT_EQ(plan.placement.size(), 1u);
  EXPECT_TRUE(plan.placement[0].node.empty() && plan.placement[0].host.empty() &&
              plan.placement[0].device_type.empty());
}

// `predicted.step_s` and `policy` are what poplar plan says of its plan: kept where they
// have its types, ignored (never an error) where a hand-edited plan gives others.
TEST(WorkerPlan, KeepsWhatPoplarPlanSaysOfItWhereItHasItsTypes) {
  const std::string ranks = R"("stage": 0, "global_batch": 4, "ranks": [{"rank": 0, "micro_batches": [4]}])";
  const WorkerPlan written =
      ParseWorkerPlan("{" + ranks + R"(, "policy": "poplar", "predicted": {"step_s": 0.25}})", "p.json");
  EXPECT_EQ(written.policy, "poplar");
  EXPECT_EQ(written.predicted_step_s, 0.25);
  for (const std::string odd : {R"("policy": 3, "predicted": {"step_s": "x"})", R"("predicted": {"step_s": -1})",
                                R"("predicted": [1])", R"("predicted": {"step_s": 0})"}) {
    const WorkerPlan plan = ParseWorkerPlan("{" + ranks + ", " + odd + "}", "p.json");
    EXPECT_EQ(plan.policy, std::nullopt) << odd;
    EXPECT_EQ(plan.predicted_step_s, std::nullopt) << odd;
  }
}

// The format is optional (hand-written plans leave it out) but never wrong.
TEST(WorkerPlan, ReadsOnlyItsOwnFormat) {
  const std::string ranks = R"("stage": 0, "global_batch": 4, "ranks": [{"rank": 0, "micro_batches": [4]}])";
  EXPECT_EQ(ParseWorkerPlan("{\"format\": \"poplar-plan/1\", " + ranks + "}", "p.json").global_batch, 4);
  try {
    ParseWorkerPlan("{\"format\": \"poplar-profile/1\", " + ranks + "}", "p.json");
    ADD_FAILURE() << "a profile's format was read as a plan's";
  } catch (const InputError& error) {
    EXPECT_EQ(error.key(), "format");
    EXPECT_EQ(error.reason(), "must be \"poplar-plan/1\", got \"poplar-profile/1\"");
  }
}

// A misspelt key of a hand-written plan is named where the key it stands for is missing.
TEST(WorkerPlan, AMisspeltListIsNamed) {
  try {
    ParseWorkerPlan(R"({"stage": 0, "global_batch": 4, "ranks": [{"rank": 0, "micro_batchs": [4]}]})", "p.json");
    ADD_FAILURE() << "read without micro_batches";
  } catch (const InputError& error) {
    EXPECT_EQ(error.key(), "ranks[0].micro_batches");
    EXPECT_EQ(error.reason(), "is required; found 'micro_batchs': a misspelling?");
  }
}

// The model the plan was made for is kept for the head's check; hand-written plans
// leave it out.
TEST(WorkerPlan, KeepsTheModelItWasMadeFor) {
  const std::string ranks = R"("stage": 0, "global_batch": 4, "ranks": [{"rank": 0, "micro_batches": [4]}])";
  const WorkerPlan made =
      ParseWorkerPlan("{\"model\": {\"params\": 124439808, \"precision\": \"mixed\"}, " + ranks + "}", "p.json");
  EXPECT_EQ(made.model_params, 124439808);
  EXPECT_EQ(made.model_precision, "mixed");
  const WorkerPlan hand_written = ParseWorkerPlan("{" + ranks + "}", "p.json");
  EXPECT_FALSE(hand_written.model_params || hand_written.model_precision);
  for (const auto& [model, key] : std::vector<std::pair<std::string, std::string>>{
           {R"("gpt2")", "model"}, {R"({"params": 0})", "model.params"}, {R"({"params": "1M"})", "model.params"}}) {
    SCOPED_TRACE(model);
    try {
      ParseWorkerPlan("{\"model\": " + model + ", " + ranks + "}", "p.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& error) {
      EXPECT_EQ(error.key(), key);
    }
  }
}

// State shares are relative, every rank has one or none, and at least one holds state.
TEST(WorkerPlan, ReadsStateSharesAndRefusesBadOnes) {
  const auto plan_with = [](int stage, const std::string& first, const std::string& second) {
    return "{\"stage\": " + std::to_string(stage) +
           R"(, "global_batch": 4, "ranks": [{"rank": 0, "micro_batches": [2])" + first +
           R"(}, {"rank": 1, "micro_batches": [2])" + second + "}]}";
  };
  const WorkerPlan plan = ParseWorkerPlan(plan_with(3, R"(, "state_share": 0.75)", R"(, "state_share": 0)"), "p.json");
  EXPECT_EQ(plan.state_shares, (std::vector<double>{0.75, 0}));
  EXPECT_TRUE(ParseWorkerPlan(plan_with(1, "", ""), "p.json").state_shares.empty());
  const std::vector<std::tuple<int, std::string, std::string, std::string, std::string>> refused = {
      {0, R"(, "state_share": 1)", R"(, "state_share": 1)", "ranks[0].state_share",
       "stage 0 keeps every rank's state whole: it has no shares"},
      {1, R"(, "state_share": 1)", "", "ranks[1].state_share",
       "is missing: give every rank a state_share, or none (the even split)"},
      {2, R"(, "state_share": 0)", R"(, "state_share": 0)", "ranks",
       "the state_share values add up to 0: some rank must hold the state"},
      {3, R"(, "state_share": -1)", R"(, "state_share": 1)", "ranks[0].state_share",
       "must be a share of the model state from 0 to 1e9, relative to the other ranks' (0 holds none), got -1"},
      {3, R"(, "state_share": "half")", R"(, "state_share": 1)", "ranks[0].state_share", ""},
  };
  for (const auto& [stage, first, second, key, reason] : refused) {
    SCOPED_TRACE(first + " " + second);
    try {
      ParseWorkerPlan(plan_with(stage, first, second), "p.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& error) {
      EXPECT_EQ(error.file(), "p.json");
      EXPECT_EQ(error.key(), key);
      if (!reason.empty()) {
        EXPECT_EQ(error.reason(), reason);
      }
    }
  }
}

}  // namespace
}  // namespace poplar
