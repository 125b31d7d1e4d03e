// The agent's profiler: the worker command it builds for a GPU and for an emulated
// device, and its cache. A stand-in worker (a shell script) records how it was started
// and writes a minimal profile.
#include "agent/profiler.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "test_support.h"

namespace poplar {
namespace {

using poplar::testing::Contains;
using poplar::testing::ScratchDir;

// Appends one line per start to calls.log: the arguments, then the CUDA variables.
// Writes a profile of the stages it was asked for to the -o path; stage s measures
// 0.0ss seconds, so that each stage's numbers say whose they are.
const char kFakeWorker[] = R"(#!/bin/sh
out=""; stages=""
previous=""
for arg in "$@"; do
  [ "$previous" = "-o" ] && out=$arg
  if [ "$previous" = "--stage" ]; then
    [ -n "$stages" ] && stages="$stages,"
    stages="$stages{\"stage\": $arg, \"world_size\": 1, \"max_micro_batch\": 2, \"optimizer_step_s\": 0.001,
     \"points\": [{\"micro_batch\": 1, \"compute_s\": 0.0$arg$arg, \"peak_bytes\": 100}]}"
  fi
  previous=$arg
done
echo "fake-worker: measuring stages $stages"
echo "fake-worker: wrote $out"
echo "$* | CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset} CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-unset}" >> "$(dirname "$0")/calls.log"
cat > "$out" <<EOF
{"format": "poplar-profile/1", "device_type": "T", "memory_bytes": 1000, "emulated": false,
 "model": {"params": 10, "precision": "mixed"}, "stages": [$stages]}
EOF
)";

// A GPU as NVML discovery reports it.
DeviceInfo H200(int index = 0) {
  DeviceInfo gpu;
  gpu.type = "NVIDIA-H200";
  gpu.index = index;
  gpu.memory_bytes = std::int64_t{141} << 30;
  gpu.compute_capability = "9.0";
  return gpu;
}

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string worker = dir_.Write("fake-worker", kFakeWorker);
    ::chmod(worker.c_str(), 0755);
    config_.work_dir = dir_.path() + "/work";
    config_.cache_dir = dir_.path() + "/cache";
    config_.worker = worker;
    std::filesystem::create_directories(config_.work_dir);
    settings_.model_config_json =
        R"({"arch": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 256, "block_size": 8})";
    settings_.precision = "bf16";
  }

  std::vector<std::string> Calls() const {
    std::ifstream in(dir_.path() + "/calls.log");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::string Run(const DeviceInfo& device, std::vector<std::string>* progress = nullptr,
                  const ClaimDeviceFn& claim = {}) {
    Profiler profiler(config_, "poplar-worker 0.1.0 (libtorch 2.x, CUDA)", spawner_);
    return profiler.Run(
        settings_, device,
        [progress](const std::string& line, bool cached) {
          if (progress && !line.empty()) progress->push_back((cached ? "cached: " : "") + line);
          return true;
        },
        claim);
  }

  ScratchDir dir_{"profiler"};
  AgentConfig config_;
  ProfileSettings settings_;
  Spawner spawner_;
};

// An agent killed while it measures leaves its private files in the cache; the next
// agent removes those of agents no longer running, and keeps the rest.
TEST_F(ProfilerTest, TemporariesOfStoppedAgentsAreRemovedFromTheCache) {
  const std::string alive = std::to_string(::getpid());
  const std::string dead = "999999999";  // above any pid_max (2^22)
  const std::vector<std::string> names = {"emu-stages0,1." + dead + "-2.model.json",
                                          "emu-stages0." + dead + "-1.partial.json",
                                          "emu-stage0-0123456789abcdef.json.tmp." + dead,
                                          "emu-stages0." + alive + "-1.model.json", "emu-stage0-0123456789abcdef.json"};
  for (const std::string& name : names) dir_.Write("cache/profiles/" + name, "{}");
  Profiler profiler(config_, "poplar-worker 0.1.0", spawner_);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path() + "/cache/profiles")) {
    left.push_back(entry.path().filename());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{names[4], names[3]}));
}

TEST_F(ProfilerTest, MeasuresAGpuWithTheCudaProfileModeOnThatGpuOnly) {
  const DeviceInfo gpu = H200(/*index=*/3);
  settings_.stages = {2, 0};
  const auto merged = nlohmann::json::parse(Run(gpu));
  ASSERT_EQ(merged["stages"].size(), 2u);
  EXPECT_EQ(merged["stages"][0]["stage"], 0);  // in stage order
  EXPECT_EQ(merged["stages"][1]["stage"], 2);

  const auto calls = Calls();
  ASSERT_EQ(calls.size(), 1u) << "one worker measures the stages together (interleaved)";
  EXPECT_TRUE(Contains(calls[0], "--stage 0 --stage 2")) << calls[0];
  for (const auto& call : calls) {
    EXPECT_TRUE(Contains(call, "profile --model-config")) << call;
    EXPECT_TRUE(Contains(call, "--device-type NVIDIA-H200 --device cuda")) << call;
    EXPECT_TRUE(Contains(call, "--precision bf16")) << call;
    EXPECT_TRUE(Contains(call, "CUDA_VISIBLE_DEVICES=3 CUDA_DEVICE_ORDER=PCI_BUS_ID")) << call;
    // Emulation settings are for CPU devices only (the worker refuses them on a GPU).
    EXPECT_FALSE(Contains(call, "--threads")) << call;
    EXPECT_FALSE(Contains(call, "--slowdown")) << call;
    EXPECT_FALSE(Contains(call, "--memory-bytes")) << call;
  }
}

TEST_F(ProfilerTest, MeasuresAnEmulatedDeviceOnTheCpuWithItsSettings) {
  DeviceInfo emulated{"emu-slow", 0, 64 << 20, "", true, {"emu-slow", 1, 2, 2.5, 0, 64 << 20}, {}};
  settings_.stages = {1};
  Run(emulated);
  const auto calls = Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_TRUE(Contains(calls[0], "--device cpu")) << calls[0];
  EXPECT_TRUE(Contains(calls[0], "--threads 2 --slowdown 2.5 --memory-bytes 67108864")) << calls[0];
  EXPECT_TRUE(Contains(calls[0], "CUDA_VISIBLE_DEVICES=unset")) << calls[0];
}

TEST_F(ProfilerTest, AStageMeasuredBeforeComesFromTheCache) {
  const DeviceInfo gpu = H200();
  settings_.stages = {0, 1};
  const std::string first = Run(gpu);
  ASSERT_EQ(Calls().size(), 1u);

  std::vector<std::string> progress;
  EXPECT_EQ(Run(gpu, &progress), first);
  EXPECT_EQ(Calls().size(), 1u) << "nothing was measured again";
  ASSERT_EQ(progress.size(), 2u);
  for (const auto& line : progress) EXPECT_TRUE(Contains(line, "cached: stage")) << line;

  settings_.precision = "fp32";  // another setting: measured anew
  Run(gpu);
  EXPECT_EQ(Calls().size(), 2u);
}

TEST_F(ProfilerTest, OnlyAMeasurementClaimsADeviceAndRunsOnTheOneClaimed) {
  settings_.stages = {0};
  int claims = 0;
  const auto claim = [&claims] {
    ++claims;
    return H200(/*index=*/5);  // the free one; the request named the type by GPU 0
  };
  Run(H200(0), nullptr, claim);
  EXPECT_EQ(claims, 1);
  ASSERT_EQ(Calls().size(), 1u);
  EXPECT_TRUE(Contains(Calls()[0], "CUDA_VISIBLE_DEVICES=5 ")) << Calls()[0];

  Run(H200(0), nullptr, claim);  // cached: no device needed
  EXPECT_EQ(claims, 1);
  EXPECT_EQ(Calls().size(), 1u);

  const auto busy = []() -> DeviceInfo { throw DeviceUnavailable("NVIDIA-H200 is in use"); };
  settings_.stages = {0, 1};  // stage 1 is not cached
  EXPECT_THROW(Run(H200(0), nullptr, busy), DeviceUnavailable);
  EXPECT_EQ(Calls().size(), 1u) << "nothing was started";
}

TEST_F(ProfilerTest, OnlyTheStagesMissingFromTheCacheAreMeasuredAndMergedInOrder) {
  const DeviceInfo gpu = H200();
  settings_.stages = {1, 3};
  Run(gpu);
  settings_.stages = {0, 1, 2, 3};
  std::vector<std::string> progress;
  const auto merged = nlohmann::json::parse(Run(gpu, &progress));

  const auto calls = Calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(Contains(calls[1], "--stage 0 --stage 2")) << calls[1];
  EXPECT_FALSE(Contains(calls[1], "--stage 1")) << calls[1];
  EXPECT_FALSE(Contains(calls[1], "--stage 3")) << calls[1];
  ASSERT_FALSE(progress.empty());
  EXPECT_TRUE(Contains(progress.front(), "cached: stage 1")) << progress.front();
  // The worker's lines reach the caller, except the one naming its private output file,
  // which the profiler removes; each measured stage is reported with its cache file.
  int worker_lines = 0;
  int newly_cached = 0;
  for (const auto& line : progress) {
    EXPECT_FALSE(Contains(line, ".partial.json")) << line;
    if (Contains(line, "fake-worker: measuring")) ++worker_lines;
    if (Contains(line, ": measured, cached (NVIDIA-H200-stage")) ++newly_cached;
  }
  EXPECT_EQ(worker_lines, 1);
  EXPECT_EQ(newly_cached, 2);
  ASSERT_EQ(merged["stages"].size(), 4u);
  for (int stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(merged["stages"][stage]["stage"], stage);
    // Each stage's own measurement (the fake worker's time names its stage), not another's.
    EXPECT_DOUBLE_EQ(merged["stages"][stage]["points"][0]["compute_s"].get<double>(), 0.011 * stage);
  }
}

TEST_F(ProfilerTest, RefusesBadSettingsBeforeStartingAWorker) {
  const DeviceInfo gpu = H200();
  settings_.precision = "fp8";
  EXPECT_THROW(Run(gpu), InputError);
  settings_.precision = "bf16";
  settings_.model_config_json = "[1, 2]";
  EXPECT_THROW(Run(gpu), InputError);
  settings_.model_config_json = R"({"arch": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 256})";
  EXPECT_THROW(Run(gpu), InputError);
  EXPECT_TRUE(Calls().empty()) << "no worker was started";
}

TEST_F(ProfilerTest, ARebuiltWorkerMeasuresAfreshUnderTheSameVersion) {
  const DeviceInfo gpu = H200();
  settings_.stages = {0};
  Run(gpu);
  Run(gpu);
  ASSERT_EQ(Calls().size(), 1u) << "the second run came from the cache";

  // Same --version text (the fixture's), new executable: a rebuild after a code change.
  std::ofstream(config_.worker, std::ios::app) << "# rebuilt\n";
  Run(gpu);
  EXPECT_EQ(Calls().size(), 2u) << "the rebuilt worker measured again";
}

}  // namespace
}  // namespace poplar
