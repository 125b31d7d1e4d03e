// poplar-worker train --trace: one step profiled and written as a summary of its events
// (launcher/worker/step_trace.h). Real processes on loopback.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

class StepTraceRun : public ::testing::Test {
 protected:
  StepTraceRun() {
    WriteModelConfig(scratch);
    WriteTokens(scratch, 4000);
  }

  std::vector<std::string> Args(const std::string& plan, int steps, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--timeout", "60", "--metrics", "metrics.jsonl"});
    return TrainCommand(scratch, plan, steps, extra);
  }

  nlohmann::json Read(const std::string& file) {
    std::ifstream in(scratch.path() + "/" + file);
    return nlohmann::json::parse(in);
  }

  // The event named `name` on the host, or null.
  static nlohmann::json HostEvent(const nlohmann::json& trace, const std::string& name) {
    for (const auto& event : trace["events"]) {
      if (event["name"] == name && event["on"] == "cpu") return event;
    }
    return nullptr;
  }

  ScratchDir scratch{"poplar_step_trace"};
};

TEST_F(StepTraceRun, WritesTheChosenStepsOperatorsWithThatStepsTime) {
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{4, 4}});
  const JobOutcome job = RunJob(scratch, 1, Args(plan, 4, {"--trace", "trace.json"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const nlohmann::json trace = Read("trace.json");
  EXPECT_EQ(trace["step"], 3) << "--trace-step's default: the run's third step";
  EXPECT_EQ(trace["rank"], 0);
  EXPECT_EQ(trace["device"], "cpu");
  EXPECT_EQ(trace["device_events"], 0) << "no device on the CPU";
  const std::vector<std::string> lines = ReadLines(scratch.path() + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(trace["step_s"], nlohmann::json::parse(lines[2])["step_s"]) << "the traced step's own metrics line";

  // Forward and backward of two micro-batches through 2 blocks and the head: matrix
  // products forward (recorded on this thread) and backward (on autograd's), and one
  // optimizer step's fused or per-slice AdamW arithmetic.
  const nlohmann::json backward = HostEvent(trace, "AddmmBackward0");  // the linear layers' (at::linear)
  ASSERT_FALSE(backward.is_null()) << trace.dump(1).substr(0, 3000);
  EXPECT_GT(backward["count"].get<int>(), 0);
  const nlohmann::json layer_norm = HostEvent(trace, "aten::layer_norm");
  ASSERT_FALSE(layer_norm.is_null());
  EXPECT_EQ(layer_norm["count"], 2 * (2 * 2 + 1)) << "two micro-batches, two norms a block and ln_f";
  double previous = std::numeric_limits<double>::infinity();
  std::set<std::string> names;
  for (const auto& event : trace["events"]) {
    const double total = event["total_s"];
    EXPECT_LE(total, previous) << "longest first";
    EXPECT_GE(total, 0.0);
    previous = total;
    EXPECT_TRUE(names.insert(event["on"].get<std::string>() + "/" + event["name"].get<std::string>()).second)
        << "summed by name: " << event["name"];
  }
}

TEST_F(StepTraceRun, EveryRankTracesItsOwnStepAtStageThree) {
  // {rank}: each rank its own file; the last step when --trace-step is past the run's end.
  const std::string plan = WritePlan(scratch, "plan.json", 3, {{4, 0}, {2, 2}});
  const JobOutcome job = RunJob(scratch, 2, Args(plan, 2, {"--trace", "trace-{rank}.json", "--trace-step", "9"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json trace = Read("trace-" + std::to_string(rank) + ".json");
    EXPECT_EQ(trace["rank"], rank);
    EXPECT_EQ(trace["step"], 2);
    // Stage 3 recomputes each block in its unit's backward, inside autograd's backward.
    const nlohmann::json layer_norm = HostEvent(trace, "aten::layer_norm");
    ASSERT_FALSE(layer_norm.is_null());
    const int micro_batches = rank == 0 ? 1 : 2;
    EXPECT_EQ(layer_norm["count"], micro_batches * (2 * 2 * 2 + 1))
        << "each block's two norms forward and again in its recompute, and ln_f once (its graph kept)";
  }
}

TEST_F(StepTraceRun, AResumedRunTracesItsOwnNthStep) {
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{4}});
  const JobOutcome first = RunJob(scratch, 1, Args(plan, 2, {"--checkpoint-dir", "checkpoints"}));
  ASSERT_TRUE(first.AllSucceeded()) << first.Describe();
  const JobOutcome resumed =
      RunJob(scratch, 1, Args(plan, 5, {"--resume", "checkpoints", "--trace", "trace.json", "--trace-step", "2"}));
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
  const nlohmann::json trace = Read("trace.json");
  EXPECT_EQ(trace["step"], 4) << "the second step the resumed run takes (it starts after step 2)";
  const std::vector<std::string> lines = ReadLines(scratch.path() + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 5u) << "a resumed run appends";
  EXPECT_EQ(nlohmann::json::parse(lines[3])["step"], 4);
  EXPECT_EQ(trace["step_s"], nlohmann::json::parse(lines[3])["step_s"]);

  // A run that takes no step has nothing to trace: it says so, and succeeds.
  std::filesystem::remove(scratch.path() + "/trace.json");
  const JobOutcome done = RunJob(scratch, 1, Args(plan, 2, {"--resume", "checkpoints", "--trace", "trace.json"}));
  ASSERT_TRUE(done.AllSucceeded()) << done.Describe();
  EXPECT_TRUE(Contains(done.errors[0], "--trace: nothing to trace")) << done.errors[0];
  EXPECT_FALSE(std::filesystem::exists(scratch.path() + "/trace.json"));
}

TEST_F(StepTraceRun, BadTraceFlagsAreRefusedByNameBeforeTraining) {
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{4}});
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {{"--trace", "metrics.jsonl"}, {"--trace", "--metrics", "each output needs a path of its own"}},
      {{"--trace", "missing/trace.json"}, {"--trace", "missing"}},
      {{"--trace", "trace.json", "--trace-step", "0"}, {"--trace-step"}},
      {{"--trace-step", "2"}, {"--trace-step", "--trace"}},
  };
  for (const Case& c : cases) {
    std::filesystem::remove(scratch.path() + "/metrics.jsonl");
    const JobOutcome job = RunJob(scratch, 1, Args(plan, 2, c.flags));
    ASSERT_EQ(job.exit_codes.size(), 1u);
    EXPECT_NE(job.exit_codes[0], 0) << c.flags[0];
    for (const std::string& word : c.words) EXPECT_TRUE(Contains(job.errors[0], word)) << job.errors[0];
    EXPECT_FALSE(std::filesystem::exists(scratch.path() + "/trace.json"));
    if (std::filesystem::exists(scratch.path() + "/metrics.jsonl")) {
      EXPECT_TRUE(ReadLines(scratch.path() + "/metrics.jsonl").empty()) << "no step ran: " << job.errors[0];
    }
  }
}

}  // namespace
}  // namespace poplar::testing
