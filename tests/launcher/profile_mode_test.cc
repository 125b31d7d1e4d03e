// `poplar-worker profile` on an emulated device: finds the largest micro-batch under a
// memory cap by running out of memory and recovering, and writes a profile the planner
// reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.h"
#include "planner/base/number_text.h"
#include "planner/formats/model_config.h"
#include "planner/formats/profile.h"
#include "planner/model/memory_model.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

constexpr std::int64_t kCap = 12 << 20;  // 12 MiB emulated device

// What a profile's stderr says of each pass of each stage: pass 1's line gives the sizes
// that fit and the timed runs, a later pass's line the timed runs of that pass.
struct PassRuns {
  int pass = 0;
  int stage = 0;
  int sizes = 0;  // pass 1 only
  int timed = 0;
};

std::vector<PassRuns> TimedRunsByPass(const std::string& err) {
  static const std::regex first(
      R"(poplar-worker profile: pass 1: stage (\d): largest micro-batch \d+, (\d+) sizes, (\d+) timed runs)");
  static const std::regex later(R"(poplar-worker profile: pass (\d+): stage (\d): (\d+) timed runs)");
  std::vector<PassRuns> passes;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_search(line, match, first)) {
      passes.push_back({1, std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3])});
    } else if (std::regex_search(line, match, later)) {
      passes.push_back({std::stoi(match[1]), std::stoi(match[2]), 0, std::stoi(match[3])});
    }
  }
  return passes;
}

// `extra`: more flags, after the others; sizes grow up to `largest_micro_batch`.
ProcessOutcome RunProfile(const ScratchDir& scratch, std::int64_t cap, const std::string& output, int repeats = 1,
                          const std::vector<std::string>& extra = {}, int largest_micro_batch = 512) {
  ChildOptions options;
  options.argv = {POPLAR_WORKER_BINARY,
                  "profile",
                  "--model-config",
                  scratch.path() + "/model.json",
                  "-o",
                  output,
                  "--device-type",
                  "tiny-cpu",
                  "--memory-bytes",
                  std::to_string(cap),
                  "--threads",
                  "1",
                  "--repeats",
                  std::to_string(repeats),
                  "--largest-micro-batch",
                  std::to_string(largest_micro_batch)};
  options.argv.insert(options.argv.end(), extra.begin(), extra.end());
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
      EXPECT_EQ(point.graph_compute_s, 0);  // CUDA graphs are a GPU's: nothing replays on the CPU
    }
    // Peak memory grows with the micro-batch.
    EXPECT_GT(stage.points.back().peak_bytes, stage.points.front().peak_bytes);
    EXPECT_GT(stage.optimizer_step_s, 0);
    // Stages 1-3 also time the step holding half the state, for the part that does not
    // shrink with it (how large it comes out is a timing, left to the benchmarks).
    if (stage.stage == 0) {
      EXPECT_FALSE(stage.optimizer_fixed_s.has_value());
    } else {
      ASSERT_TRUE(stage.optimizer_fixed_s.has_value()) << "stage " << stage.stage;
      EXPECT_GE(*stage.optimizer_fixed_s, 0) << "stage " << stage.stage;
      EXPECT_LE(*stage.optimizer_fixed_s, stage.optimizer_step_s) << "stage " << stage.stage;
    }
  }

  // Twice the memory holds more than twice the samples' activations would need less.
  const ProcessOutcome bigger = RunProfile(scratch, 2 * kCap, scratch.path() + "/bigger.json");
  ASSERT_EQ(bigger.exit_code, 0) << bigger.err;
  EXPECT_GT(LoadProfileFile(scratch.path() + "/bigger.json").stages[0].max_micro_batch,
            profile.stages[0].max_micro_batch);
}

// A device with a declared rate (--gflops) computes at it: every size measured lasts its
// FLOPs over the rate (20 ms a sample here), the host's own few milliseconds absorbed,
// and the profile says so.
TEST(ProfileMode, ADeclaredRateIsWhatTheProfileMeasures) {
  ScratchDir scratch("poplar_profile");
  WriteModelConfig(scratch, 32, 64);
  const ModelConfig config = LoadModelConfig(scratch.path() + "/model.json");
  const double per_sample = 0.020;
  const double gflops = config.TrainingFlopsPerToken() * config.block_size / per_sample / 1e9;
  const std::string path = scratch.path() + "/rated.json";
  const ProcessOutcome run =
      RunProfile(scratch, kCap, path, /*repeats=*/1, {"--stage", "0", "--gflops", ShortestText(gflops)}, 4);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const DeviceProfile profile = LoadProfileFile(path);
  EXPECT_TRUE(Contains(profile.source, "GFLOP/s")) << profile.source;
  ASSERT_EQ(profile.stages.size(), 1u);
  ASSERT_EQ(profile.stages[0].points.size(), 3u);  // 1, 2 and 4 samples
  for (const ProfilePoint& point : profile.stages[0].points) {
    const double lasts = per_sample * point.micro_batch;
    EXPECT_GE(point.compute_s, lasts) << point.micro_batch;
    EXPECT_LT(point.compute_s, lasts * 1.1 + 0.002) << point.micro_batch;
  }
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
  options.argv = {POPLAR_WORKER_BINARY,       "profile",       "--model-config", scratch.path() + "/model.json", "-o",
                  scratch.path() + "/p.json", "--device-type", "../up"};
  const ProcessOutcome type = RunProcess(options, scratch.path());
  EXPECT_EQ(type.exit_code, 1);
  EXPECT_TRUE(ContainsAll(type.err, {"--device-type", "plain name", "'../up'"})) << type.err;
  // Nor a type a JSON file cannot hold, or a table shows as two words: refused before
  // the measuring, not at the write.
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
  // Nor may the profile replace the model configuration it reads.
  const std::string model = ReadWholeFile(scratch.path() + "/model.json");
  const ProcessOutcome over = RunProfile(scratch, kCap, scratch.path() + "/model.json");
  EXPECT_EQ(over.exit_code, 1);
  EXPECT_TRUE(ContainsAll(over.err, {"--output", "is the model configuration (--model-config)"})) << over.err;
  EXPECT_EQ(ReadWholeFile(scratch.path() + "/model.json"), model);
  // A cap that does not hold the model itself names the flag.
  const ProcessOutcome tiny = RunProfile(scratch, 1000, scratch.path() + "/tiny.json");
  EXPECT_EQ(tiny.exit_code, 1);
  EXPECT_TRUE(ContainsAll(tiny.err, {"model.json: the model does not fit in 1000 bytes (--memory-bytes) at stage 0",
                                     "its states alone need more"}))
      << tiny.err;
  EXPECT_FALSE(std::filesystem::exists(scratch.path() + "/tiny.json"));
}

// A device whose memory holds a sample only beside part of the state: stage 1 (the
// optimizer state partitioned) is measured holding a share of it, as rank 0 of two, and
// the profile says so. Neither profile holds the collectives' buffers; both record the
// elements in flight (stage 1: every bucket's reduction in the step's last micro-batch),
// and the memory model, reading either for a rank of two at that share, adds the same
// buffers to the same states and derives the same cap.
TEST(ProfileMode, AStageWhoseStatesDoNotFitIsMeasuredHoldingAShare) {
  ScratchDir scratch("poplar_profile_share");
  WriteModelConfig(scratch, /*n_embd=*/128, /*block_size=*/16, /*n_layer=*/4);
  auto profile = [&](std::int64_t cap, const std::string& output) {
    return RunProfile(scratch, cap, output, /*repeats=*/1, {"--stage", "1", "--point-seconds", "0"});
  };
  const ProcessOutcome whole_run = profile(0, scratch.path() + "/whole.json");
  ASSERT_EQ(whole_run.exit_code, 0) << whole_run.err;
  const DeviceProfile whole = LoadProfileFile(scratch.path() + "/whole.json");
  const StageProfile& all = whole.stages.at(0);
  EXPECT_FALSE(all.state_share.has_value());
  // One rank's layout needs no padding: the whole model, reduced in one step.
  EXPECT_EQ(all.collective_elements_in_flight, whole.model.params);
  // 1 MB short of one sample beside the whole state; a share of the optimizer state (8
  // bytes a parameter, 6.6 MB here) frees room for a few.
  const std::int64_t cap = all.points.at(0).peak_bytes - 1'000'000;
  const ProcessOutcome part_run = profile(cap, scratch.path() + "/part.json");
  ASSERT_EQ(part_run.exit_code, 0) << part_run.err;
  EXPECT_TRUE(Contains(part_run.err, "stage 1: nothing fits holding all of the partitioned state; measuring with 1/2"))
      << part_run.err;
  EXPECT_TRUE(Contains(part_run.err, "pass 1: stage 1 holding 1/")) << part_run.err;
  const DeviceProfile part = LoadProfileFile(scratch.path() + "/part.json");
  const StageProfile& measured = part.stages.at(0);
  ASSERT_TRUE(measured.state_share.has_value());
  const double share = *measured.state_share;
  EXPECT_EQ(share, 0.5);
  EXPECT_TRUE(Contains(part_run.err, "holding 1/2 of the state"));
  EXPECT_GT(measured.max_micro_batch, 1);
  for (const ProfilePoint& point : measured.points) EXPECT_LE(point.peak_bytes, cap);
  EXPECT_GT(measured.optimizer_step_s, 0);
  // Two ranks' layout pads each bucket to an even size.
  EXPECT_GE(measured.collective_elements_in_flight, whole.model.params);
  EXPECT_LE(measured.collective_elements_in_flight, whole.model.params + 64);

  DeviceProfile capped = whole;
  capped.memory_bytes = cap;
  EXPECT_EQ(FitMemory(capped, all, 1).max_micro_batch, 0) << "the whole state leaves no room";
  const MemoryFit derived = FitMemory(capped, all, 2, share);
  const MemoryFit read = FitMemory(part, measured, 2, share);
  // fp32 gradients (4 bytes an element), two ranks' halves.
  EXPECT_NEAR(static_cast<double>(read.collective_bytes), 4.0 * measured.collective_elements_in_flight, 1);
  EXPECT_NEAR(derived.collective_bytes, read.collective_bytes, 4 * 64);
  EXPECT_NEAR(derived.max_micro_batch, read.max_micro_batch, 1);
  EXPECT_LT(read.max_micro_batch, measured.max_micro_batch) << "the buffers take room measured alone";
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
      "pass 1: stage 0", "pass 1: stage 1", "pass 1: stage 2", "pass 1: stage 3", "pass 2: stage 1", "pass 2: stage 2",
      "pass 2: stage 3", "pass 2: stage 0", "pass 3: stage 2", "pass 3: stage 3", "pass 3: stage 0", "pass 3: stage 1"};
  EXPECT_EQ(order, expected) << run.err;
  // A size is timed over consecutive runs while they are short (this model's are a few
  // milliseconds), up to 5 a pass, in every pass: more timed runs than sizes, at most 5
  // per size.
  const std::vector<PassRuns> passes = TimedRunsByPass(run.err);
  ASSERT_EQ(passes.size(), 12u) << run.err;
  std::map<int, int> sizes;  // by stage, from pass 1
  for (const PassRuns& pass : passes) {
    if (pass.pass == 1) sizes[pass.stage] = pass.sizes;
    ASSERT_GT(sizes[pass.stage], 0) << "pass 1 comes first: " << run.err;
    EXPECT_GT(pass.timed, sizes[pass.stage]) << "pass " << pass.pass << ", stage " << pass.stage;
    EXPECT_LE(pass.timed, 5 * sizes[pass.stage]) << "pass " << pass.pass << ", stage " << pass.stage;
  }
  // Each stage records what its engine moves, as the cost model charges it: the whole
  // model once per step or round (one bucket here), and at stage 3 the schedule's
  // gathers: every block twice, the tied embedding and the final LayerNorm once each.
  const ModelConfig config{Architecture::kGpt, 2, 2, 32, 256, 64};
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

TEST(ProfileMode, WithNoTimeToFillASizeIsTimedOnceAPass) {
  // --point-seconds 0: the first timed run of a size already adds up to it, so each size
  // is timed once a pass (where the default times this model's sizes several times).
  ScratchDir scratch("poplar_profile_point_seconds");
  WriteModelConfig(scratch, 32, 64);
  const std::string path = scratch.path() + "/once.json";
  ChildOptions options;
  options.argv = {POPLAR_WORKER_BINARY,
                  "profile",
                  "--model-config",
                  scratch.path() + "/model.json",
                  "-o",
                  path,
                  "--device-type",
                  "tiny-cpu",
                  "--memory-bytes",
                  std::to_string(kCap),
                  "--threads",
                  "1",
                  "--stage",
                  "0",
                  "--repeats",
                  "2",
                  "--point-seconds",
                  "0"};
  const ProcessOutcome run = RunProcess(options, scratch.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<PassRuns> passes = TimedRunsByPass(run.err);
  ASSERT_EQ(passes.size(), 2u) << run.err;
  EXPECT_GT(passes[0].sizes, 1) << run.err;
  EXPECT_EQ(passes[0].timed, passes[0].sizes) << run.err;
  EXPECT_EQ(passes[1].timed, passes[0].sizes) << run.err;
  EXPECT_EQ(LoadProfileFile(path).stages.at(0).points.size(), static_cast<std::size_t>(passes[0].sizes));
}

TEST(ProfileMode, TrainingBeyondTheEmulatedMemoryFailsWithAClearError) {
  ScratchDir scratch("poplar_profile_oom");
  WriteModelConfig(scratch, 32, 64);
  WriteTokens(scratch, 20000);
  const std::string plan = WritePlan(scratch, "plan.json", 0, {{256}});
  const JobOutcome job =
      RunJob(scratch, 1,
             {"train", "--plan", plan, "--model-config", scratch.path() + "/model.json", "--data",
              scratch.path() + "/tokens.bin", "--memory-bytes", std::to_string(kCap), "--log-every", "0"});
  ASSERT_EQ(job.exit_codes[0], 1) << job.Describe();
  EXPECT_TRUE(Contains(job.errors[0], "out of memory")) << job.errors[0];
}

}  // namespace
}  // namespace poplar::testing
