// `poplar-worker profile` on an emulated device: finds the largest micro-batch under a
// memory cap by running out of memory and recovering, and writes a profile the planner
// reads.
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.h"
#include "planner/model_config.h"
#include "planner/profile.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

constexpr std::int64_t kCap = 12 << 20;  // 12 MiB emulated device

ProcessOutcome RunProfile(const ScratchDir& scratch, std::int64_t cap, const std::string& output, int repeats = 1) {
  ChildOptions options;
  options.argv = {POPLAR_WORKER_BINARY, "profile", "--model-config", scratch.path() + "/model.json",
                  "-o", output, "--device-type", "tiny-cpu", "--memory-bytes", std::to_string(cap),
                  "--threads", "1", "--repeats", std::to_string(repeats), "--largest-micro-batch", "512"};
  return RunProcess(options, scratch.path());
}

TEST(ProfileMode, FindsTheLargestMicroBatchUnderAnEmulatedMemoryCap) {
  ScratchDir scratch("poplar_profile");
  WriteModelConfig(scratch, 32, 64);
  const std::string path = scratch.path() + "/tiny-cpu.json";
  const ProcessOutcome run = RunProfile(scratch, kCap, path);
  ASSERT_EQ(run.exit_code, 0) << run.err;

  const DeviceProfile profile = LoadProfileFile(path);
  EXPECT_TRUE(profile.emulated);
  EXPECT_EQ(profile.memory_bytes, kCap);
  // The model measured, whole: the planner checks it against the job's.
  ASSERT_TRUE(profile.model.config.has_value());
  EXPECT_EQ(*profile.model.config, LoadModelConfig(scratch.path() + "/model.json"));
  ASSERT_EQ(profile.stages.size(), 4u);
  for (const StageProfile& stage : profile.stages) {
    // Memory ran out below the search limit, and the search went on after it.
    EXPECT_GT(stage.max_micro_batch, 1);
    EXPECT_LT(stage.max_micro_batch, 512);
    EXPECT_EQ(stage.points.back().micro_batch, stage.max_micro_batch);
    for (const ProfilePoint& point : stage.points) {
      EXPECT_LE(point.peak_bytes, kCap);
      EXPECT_GT(point.compute_s, 0);
    }
    // Peak memory grows with the micro-batch.
    EXPECT_GT(stage.points.back().peak_bytes, stage.points.front().peak_bytes);
    EXPECT_GT(stage.optimizer_step_s, 0);
  }

  // Twice the memory holds more than twice the samples' activations would need less.
  const ProcessOutcome bigger = RunProfile(scratch, 2 * kCap, scratch.path() + "/bigger.json");
  ASSERT_EQ(bigger.exit_code, 0) << bigger.err;
  EXPECT_GT(LoadProfileFile(scratch.path() + "/bigger.json").stages[0].max_micro_batch,
            profile.stages[0].max_micro_batch);
}

// Refused before minutes of measuring, not after them.
TEST(ProfileMode, AMissingOutputFolderOrAPathLikeTypeIsRefusedAtOnce) {
  ScratchDir scratch("poplar_profile");
  WriteModelConfig(scratch, 32, 64);
  const ProcessOutcome folder = RunProfile(scratch, kCap, scratch.path() + "/missing/tiny-cpu.json");
  EXPECT_EQ(folder.exit_code, 1);
  EXPECT_TRUE(ContainsAll(folder.err, {"--output", "missing does not exist"})) << folder.err;
  // A profile belongs to no job: its errors name no rank.
  EXPECT_EQ(folder.err.rfind("poplar-worker profile: error: ", 0), 0u) << folder.err;
  EXPECT_FALSE(Contains(folder.err, "pass 1")) << "nothing was measured";
  ChildOptions options;
  options.argv = {POPLAR_WORKER_BINARY, "profile", "--model-config", scratch.path() + "/model.json", "-o",
                  scratch.path() + "/p.json", "--device-type", "../up"};
  const ProcessOutcome type = RunProcess(options, scratch.path());
  EXPECT_EQ(type.exit_code, 1);
  EXPECT_TRUE(ContainsAll(type.err, {"--device-type", "plain name", "'../up'"})) << type.err;
  // Nor a type a JSON file cannot hold, or a table shows as two words: it once failed
  // only at the write, after the measuring.
  for (const std::string bad : {"\xff\xfe", "a b"}) {
    options.argv.back() = bad;
    const ProcessOutcome refused = RunProcess(options, scratch.path());
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_TRUE(ContainsAll(refused.err, {"--device-type", "plain name of ASCII"})) << refused.err;
    EXPECT_FALSE(Contains(refused.err, "pass 1")) << "nothing was measured";
  }
  // A stage given twice would be written twice, a profile the planner refuses.
  options.argv.back() = "cpu";
  options.argv.insert(options.argv.end(), {"--stage", "0", "--stage", "0"});
  const ProcessOutcome twice = RunProcess(options, scratch.path());
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_TRUE(Contains(twice.err, "--stage: stage 0 is given twice")) << twice.err;
  // Nor may the profile replace the model configuration it reads (it once did, exit 0).
  const std::string model = ReadWholeFile(scratch.path() + "/model.json");
  const ProcessOutcome over = RunProfile(scratch, kCap, scratch.path() + "/model.json");
  EXPECT_EQ(over.exit_code, 1);
  EXPECT_TRUE(ContainsAll(over.err, {"--output", "is the model configuration (--model-config)"})) << over.err;
  EXPECT_EQ(ReadWholeFile(scratch.path() + "/model.json"), model);
  // A cap that does not hold the model itself names the flag (it once said only that
  // the emulated device ran out of memory allocating some bytes).
  const ProcessOutcome tiny = RunProfile(scratch, 1000, scratch.path() + "/tiny.json");
  EXPECT_EQ(tiny.exit_code, 1);
  EXPECT_TRUE(ContainsAll(tiny.err, {"model.json: the model does not fit in 1000 bytes (--memory-bytes) at stage 0",
                                     "its states alone need more"}))
      << tiny.err;
  EXPECT_FALSE(std::filesystem::exists(scratch.path() + "/tiny.json"));
}

TEST(ProfileMode, LaterPassesTimeTheStagesInTurnAfterEveryStageWasFitted) {
  ScratchDir scratch("poplar_profile_passes");
  WriteModelConfig(scratch, 32, 64);
  const std::string path = scratch.path() + "/tiny-cpu.json";
  const ProcessOutcome run = RunProfile(scratch, kCap, path, /*repeats=*/3);
  ASSERT_EQ(run.exit_code, 0) << run.err;

  // Interleaved, not stage after stage: every stage's first pass comes before any
  // second pass, and each later pass visits every stage, starting one stage further on.
  std::vector<std::string> order;
  std::istringstream lines(run.err);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("pass ");
    if (at != std::string::npos) order.push_back(line.substr(at, std::string("pass 1: stage 0").size()));
  }
  const std::vector<std::string> expected = {
      "pass 1: stage 0", "pass 1: stage 1", "pass 1: stage 2", "pass 1: stage 3",
      "pass 2: stage 1", "pass 2: stage 2", "pass 2: stage 3", "pass 2: stage 0",
      "pass 3: stage 2", "pass 3: stage 3", "pass 3: stage 0", "pass 3: stage 1"};
  EXPECT_EQ(order, expected) << run.err;
  // A size is timed over consecutive runs while they are short (this model's are a few
  // milliseconds), up to 5 a pass: more timed runs than sizes, at most 5 per size.
  std::istringstream fitted(run.err);
  int stages_read = 0;
  for (std::string line; std::getline(fitted, line);) {
    int stage = 0, largest = 0, sizes = 0, timed = 0;
    if (std::sscanf(line.c_str(), "poplar-worker profile: pass 1: stage %d: largest micro-batch %d, %d sizes, %d timed runs",
                    &stage, &largest, &sizes, &timed) == 4) {
      ++stages_read;
      EXPECT_GT(timed, sizes) << line;
      EXPECT_LE(timed, 5 * sizes) << line;
    }
  }
  EXPECT_EQ(stages_read, 4) << run.err;
  // Each stage records what its engine moves, as the cost model charges it: the whole
  // model once per step or round (one bucket here), and at stage 3 the schedule's
  // gathers: every block twice, the tied embedding and the final LayerNorm once each.
  const GptConfig config{2, 2, 32, 256, 64};
  const std::int64_t params = config.ParameterCount();
  const std::int64_t embedding = (config.vocab_size + config.block_size) * config.n_embd;
  const std::int64_t final_norm = 2 * config.n_embd;
  for (const StageProfile& stage : LoadProfileFile(path).stages) {
    EXPECT_GT(stage.optimizer_step_s, 0);
    for (const ProfilePoint& point : stage.points) EXPECT_LE(point.peak_bytes, kCap);
    ASSERT_TRUE(stage.collectives.has_value()) << "stage " << stage.stage;
    const CollectiveParams& moved = *stage.collectives;
    switch (stage.stage) {
      case 0:
        EXPECT_EQ(moved.all_reduce_per_step.params, params);
        EXPECT_EQ(moved.all_reduce_per_step.calls, 1);
        break;
      case 1:
        EXPECT_EQ(moved.reduce_scatter_per_step.params, params);
        EXPECT_EQ(moved.all_gather_per_step.params, params);
        break;
      case 2:
        EXPECT_EQ(moved.reduce_scatter_per_round.params, params);
        EXPECT_EQ(moved.all_gather_per_step.params, params);
        break;
      default:
        EXPECT_EQ(moved.all_gather_per_round.params, 2 * params - embedding - final_norm);
        EXPECT_EQ(moved.all_gather_per_round.calls, 2 * config.n_layer + 2);  // units: embed, blocks, head
        EXPECT_EQ(moved.reduce_scatter_per_round.params, params);
        EXPECT_EQ(moved.reduce_scatter_per_round.calls, config.n_layer + 2);
        EXPECT_EQ(moved.all_reduce_per_step.calls + moved.all_gather_per_step.calls, 0);
    }
  }
}

TEST(ProfileMode, TrainingBeyondTheEmulatedMemoryFailsWithAClearError) {
  ScratchDir scratch("poplar_profile_oom");
  WriteModelConfig(scratch, 32, 64);
  WriteTokens(scratch, 20000);
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{256}});
  const JobOutcome job = RunJob(
      scratch, 1,
      {"train", "--plan", plan, "--model-config", scratch.path() + "/model.json", "--data",
       scratch.path() + "/tokens.bin", "--memory-bytes", std::to_string(kCap), "--log-every", "0"});
  ASSERT_EQ(job.exit_codes[0], 1) << job.Describe();
  EXPECT_TRUE(Contains(job.errors[0], "out of memory")) << job.errors[0];
}

}  // namespace
}  // namespace poplar::testing
