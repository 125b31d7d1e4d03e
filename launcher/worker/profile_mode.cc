#include "launcher/worker/profile_mode.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

#include "launcher/comm/communicator.h"
#include "launcher/device/device.h"
#include "launcher/device/emulated_slowdown.h"
#include "launcher/model/decoder.h"
#include "launcher/worker/stopwatch.h"
#include "launcher/zero/training_engine.h"
#include "planner/base/input_error.h"
#include "planner/base/median.h"
#include "planner/base/number_text.h"
#include "planner/base/text_file.h"
#include "planner/formats/hf_config.h"
#include "planner/formats/profile.h"

namespace poplar {
namespace {

// The smallest share of the partitioned state (stages 1-3) a stage is measured holding
// when a larger one does not fit: the planner's grid (kStateShareGrid).
constexpr double kLeastProfiledShare = 1.0 / 64;

// One timed run's measurements.
struct Sample {
  double seconds = 0;
  std::int64_t peak_bytes = 0;
};

// A size is timed over consecutive runs, as training runs consecutive micro-batches of
// one size: after its untimed runs, until the timed ones add up to
// ProfileOptions::point_seconds or there are kMostRunsPerPoint of them (at least one).
// Short micro-batches, whose time on a GPU is libtorch's CPU-side dispatch and varies
// from run to run, get several runs; long ones one. A single timed run per pass reads
// small micro-batches slower than training sustains them (docs/benchmarks.md).
constexpr int kMostRunsPerPoint = 5;

// One stage's model and engine, alive for one pass over that stage.
class StageProfiler {
 public:
  // `state_share` (stages 1-3): the fraction of the partitioned state this rank holds,
  // standing for rank 0 of two whose other is absent when below 1 (LayoutWorldSize).
  StageProfiler(const ModelConfig& config, int stage, double state_share, const ProfileOptions& options,
                Communicator& communicator, torch::Device device)
      : config_(config),
        options_(options),
        device_(device),
        speed_(SpeedOf(options.device.slowdown, options.device.gflops, config.TrainingFlopsPerToken())),
        model_(nullptr) {
    torch::manual_seed(options.seed);
    model_ = MakeDecoder(config);
    model_->to(device);
    const std::vector<double> shares =
        state_share < 1 ? std::vector<double>{state_share, 1 - state_share} : std::vector<double>{};
    engine_ = MakeEngine(stage, model_, communicator, AdamWOptions{}, BucketElements(0, device),
                         ComputingType(options.precision, device, "--precision"), shares);
    communicator.ResetMostElementsInFlight();  // what FitStage and RemeasureStage read back
  }

  // Micro-batches of `size` samples: `warm_ups` untimed runs, then timed runs as
  // point_seconds says (none if `timed` is false). Returns each timed run, with the
  // peak bytes of every run up to it, or nullopt if the size does not fit.
  // Out-of-memory errors are recovered from.
  std::optional<std::vector<Sample>> Measure(int size, int warm_ups, bool timed = true) {
    std::vector<Sample> samples;
    std::int64_t peak_bytes = 0;
    const bool fitted = Fits([&] {
      for (int run = 0; run < warm_ups; ++run) peak_bytes = std::max(peak_bytes, RunOnce(size).peak_bytes);
      while (timed && MoreRuns(samples)) {
        Sample sample = RunOnce(size);
        sample.peak_bytes = peak_bytes = std::max(peak_bytes, sample.peak_bytes);
        samples.push_back(sample);
      }
    });
    if (!fitted) return std::nullopt;
    return samples;
  }

  // Micro-batches of `size` replayed from CUDA graphs, as a one-rank job runs them at
  // stages 0-1 (micro_batch_graphs.h): an eager run and a step (the warm-up training
  // takes) and the capture (which replays once) untimed, then replays timed as Measure
  // times eager runs. Empty where the engine cannot replay (stages 2-3, the CPU,
  // --cuda-graphs off), the capture failed or memory ran out. The graphs are freed
  // before it returns.
  std::vector<double> MeasureReplays(int size) {
    std::vector<Sample> samples;
    if (!options_.device.cuda_graphs || !engine_->ReplayFromGraphs(true)) return {};
    const bool fitted = Fits([&] {
      RunOnce(size);
      engine_->Step(1.0);
      RunOnce(size);
      if (!engine_->Replays(size)) return;
      while (MoreRuns(samples)) samples.push_back(RunOnce(size));
    });
    engine_->ReplayFromGraphs(false);
    ReleaseCachedMemory(device_);
    std::vector<double> seconds;
    if (fitted) {
      for (const Sample& sample : samples) seconds.push_back(sample.seconds);
    }
    return seconds;
  }

  // What the stage's engine hands to its collectives (recorded for the cost model).
  CollectiveParams CollectivePlan() const { return engine_->CollectivePlan(); }

  // The optimizer step as training takes it: after a last micro-batch that left real
  // gradients, of `size` samples (the stage's largest that fit), stretched on an emulated
  // device as training stretches it. The step runs on what its micro-batches left in the
  // caches, and after the emulation's wait; after a micro-batch of one sample and no wait
  // it reads faster than training sustains (docs/cost-model.md, "Optimizer"). A size that
  // does not fit this time (fragmentation at the edge of memory) is halved. One untimed
  // step, then one timed.
  double OptimizerStepSeconds(int size) {
    engine_->Step(1.0);  // clears what the measurements accumulated
    const auto timed = [&](int samples) {
      double seconds = 0;
      for (int run = 0; run <= 1; ++run) {  // run 0 warms up
        auto inputs = torch::randint(config_.vocab_size, {samples, config_.block_size},
                                     torch::TensorOptions(torch::kLong).device(device_));
        const auto micro_batch = Clock::now();
        const EmulatedCompute micro_batch_compute;
        engine_->MicroBatch(inputs, inputs, /*last=*/true);
        micro_batch_compute.Stretch(SecondsSince(micro_batch), speed_, static_cast<double>(inputs.numel()));
        engine_->EndRound(true);
        Synchronize(device_);
        const auto start = Clock::now();
        const EmulatedCompute step_compute;
        engine_->Step(static_cast<double>(samples) * config_.block_size);
        Synchronize(device_);
        seconds = step_compute.Stretch(SecondsSince(start), speed_);
      }
      return seconds;
    };
    for (; size > 1; size /= 2) {
      double seconds = 0;
      if (Fits([&] { seconds = timed(size); })) return seconds;
    }
    return timed(1);  // what a measured size needed: running out of memory here is an error
  }

 private:
  // Runs `work`; false if it ran out of device memory, which is recovered from.
  bool Fits(const std::function<void()>& work) {
    try {
      work();
      return true;
    } catch (const c10::OutOfMemoryError&) {
      // The activations unwound with the exception; hand the cache back so that the
      // next, smaller size is measured on an unfragmented device.
      ReleaseCachedMemory(device_);
      return false;
    } catch (const c10::Error& error) {
      // Out of memory outside the caching allocator (a cuBLAS workspace, a kernel
      // launch) is a plain c10::Error: also "does not fit", anything else is not.
      const std::string what = error.what();
      if (what.find("out of memory") == std::string::npos && what.find("ALLOC_FAILED") == std::string::npos) {
        throw;
      }
      ReleaseCachedMemory(device_);
      return false;
    }
  }

  // Whether a size's timed runs so far call for another (kMostRunsPerPoint).
  bool MoreRuns(const std::vector<Sample>& samples) const {
    double seconds = 0;
    for (const Sample& sample : samples) seconds += sample.seconds;
    return samples.empty() ||
           (seconds < options_.point_seconds && static_cast<int>(samples.size()) < kMostRunsPerPoint);
  }

  // One micro-batch of `size` samples: its time and the peak bytes in use while it ran.
  // Throws what running out of memory throws.
  Sample RunOnce(int size) {
    auto inputs = torch::randint(config_.vocab_size, {size, config_.block_size},
                                 torch::TensorOptions(torch::kLong).device(device_));
    Synchronize(device_);
    ResetMemoryPeak(device_);
    const auto start = Clock::now();
    const EmulatedCompute compute;
    // Not the last micro-batch: gradients accumulate; stages 2-3 reduce per round.
    // MicroBatch returns the loss as a number, so the device is done when it returns.
    engine_->MicroBatch(inputs, inputs, /*last=*/false);
    const double seconds = compute.Stretch(SecondsSince(start), speed_, static_cast<double>(inputs.numel()));
    engine_->EndRound(true);
    return Sample{seconds, MemoryPeak(device_)};
  }

  const ModelConfig& config_;
  const ProfileOptions& options_;
  torch::Device device_;
  EmulatedSpeed speed_;  // as long as in training
  Decoder model_{nullptr};
  std::unique_ptr<TrainingEngine> engine_;
};

// What the passes measured of one stage: the sizes that fit and each size's samples.
struct StageSamples {
  int stage = 0;
  double state_share = 1;  // of the partitioned state, held while measuring
  int max_micro_batch = 0;
  std::map<int, std::vector<Sample>> runs;     // by micro-batch size
  std::map<int, std::vector<double>> replays;  // by size: from CUDA graphs (TimeReplays)
  std::vector<double> optimizer_steps;
  // Stages 1-3: the optimizer step holding half of state_share (MeasureHalfShareOptimizer).
  std::vector<double> half_share_optimizer_steps;
  CollectiveParams collectives;
  // The most elements its reduce-scatters and all-gathers had in flight at once, over
  // every pass (Communicator::most_elements_in_flight since the pass's engine was made),
  // the optimizer step's last micro-batch included: stage 1 reduces in no other.
  std::int64_t elements_in_flight = 0;
};

// Timed runs of every size so far.
std::size_t TimedRuns(const StageSamples& samples) {
  std::size_t runs = 0;
  for (const auto& [size, timed] : samples.runs) runs += timed.size();
  return runs;
}

// A replay that gains less than this on the same size's eager runs: GPU-bound.
constexpr double kLeastReplayGain = 0.02;

// Times replays from CUDA graphs (StageProfiler::MeasureReplays): in pass 1 of every
// size that fit, ascending, up to the first whose replays gain less than
// kLeastReplayGain on its eager runs (the larger sizes are as GPU-bound: their points
// keep their eager time alone); in later passes of the sizes pass 1 timed. Nothing
// where the stage's engine cannot replay.
void TimeReplays(StageProfiler& profiler, StageSamples& samples, bool first_pass) {
  for (const auto& [size, runs] : samples.runs) {
    if (!first_pass && samples.replays.count(size) == 0) break;
    const std::vector<double> seconds = profiler.MeasureReplays(size);
    if (seconds.empty()) break;  // cannot replay, or not this size (nor, then, larger ones)
    auto& timed = samples.replays[size];
    timed.insert(timed.end(), seconds.begin(), seconds.end());
    if (!first_pass) continue;
    std::vector<double> eager;
    for (const Sample& run : runs) eager.push_back(run.seconds);
    if (Median(seconds) > (1 - kLeastReplayGain) * Median(eager)) break;
  }
}

// Pass 1 of a stage: the sizes that fit (1, 2, 4, ... until one does not, then a binary
// search between the last that did and the first that did not), each after a warm-up
// run of its own, and the optimizer step.
StageSamples FitStage(const ModelConfig& config, int stage, double state_share, const ProfileOptions& options,
                      Communicator& communicator, torch::Device device) {
  StageSamples result;
  result.stage = stage;
  result.state_share = state_share;
  StageProfiler profiler(config, stage, state_share, options, communicator, device);
  result.collectives = profiler.CollectivePlan();
  auto fits = [&](int size) {
    auto samples = profiler.Measure(size, /*warm_ups=*/1);
    if (samples) result.runs[size] = *samples;
    return samples.has_value();
  };
  int low = 0;
  int high = 0;
  for (int size = 1; size <= options.largest_micro_batch; size *= 2) {
    if (!fits(size)) {
      high = size;
      break;
    }
    low = size;
  }
  while (high - low > 1) {
    const int middle = low + (high - low) / 2;
    (fits(middle) ? low : high) = middle;
  }
  result.max_micro_batch = low;
  TimeReplays(profiler, result, /*first_pass=*/true);
  if (low > 0) result.optimizer_steps.push_back(profiler.OptimizerStepSeconds(low));
  result.elements_in_flight = communicator.most_elements_in_flight();
  std::cerr << "poplar-worker profile: pass 1: stage " << stage
            << (state_share < 1 ? " holding " + HeldShareText(state_share) + " of the state" : "")
            << ": largest micro-batch " << low << ", " << result.runs.size() << " sizes, " << TimedRuns(result)
            << " timed runs"
            << (result.replays.empty()
                    ? ""
                    : ", " + std::to_string(result.replays.size()) + " sizes replayed from CUDA graphs")
            << "\n";
  return result;
}

// Stages 1-3: the optimizer step of a rank holding half the stage's share, after a
// micro-batch of the same size, on an engine of its own (made once the stage's is gone).
// Beside the step at the whole share it tells the part that shrinks with the state a
// rank holds from the part that does not (StageProfile::optimizer_fixed_s). A device
// that runs out of memory for it measures nothing: the whole step then scales.
void MeasureHalfShareOptimizer(StageSamples& samples, const ModelConfig& config, const ProfileOptions& options,
                               Communicator& communicator, torch::Device device) {
  if (samples.stage == 0 || samples.max_micro_batch == 0) return;
  try {
    StageProfiler half(config, samples.stage, samples.state_share / 2, options, communicator, device);
    samples.half_share_optimizer_steps.push_back(half.OptimizerStepSeconds(samples.max_micro_batch));
  } catch (const c10::OutOfMemoryError&) {
    ReleaseCachedMemory(device);
  }
}

// A later pass of a stage: a fresh model and engine, one warm-up run at the largest size,
// then every size that fit timed again (as point_seconds says), and the optimizer step.
// A size that does not fit this time (fragmentation at the edge of memory) keeps its
// earlier samples.
void RemeasureStage(StageSamples& samples, int pass, const ModelConfig& config, const ProfileOptions& options,
                    Communicator& communicator, torch::Device device) {
  const std::size_t runs_before = TimedRuns(samples);
  {
    StageProfiler profiler(config, samples.stage, samples.state_share, options, communicator, device);
    profiler.Measure(samples.max_micro_batch, /*warm_ups=*/1, /*timed=*/false);
    for (auto& [size, runs] : samples.runs) {
      if (auto timed = profiler.Measure(size, /*warm_ups=*/0)) runs.insert(runs.end(), timed->begin(), timed->end());
    }
    TimeReplays(profiler, samples, /*first_pass=*/false);
    samples.optimizer_steps.push_back(profiler.OptimizerStepSeconds(samples.max_micro_batch));
    samples.elements_in_flight = std::max(samples.elements_in_flight, communicator.most_elements_in_flight());
  }
  MeasureHalfShareOptimizer(samples, config, options, communicator, device);
  std::cerr << "poplar-worker profile: pass " << pass << ": stage " << samples.stage << ": "
            << TimedRuns(samples) - runs_before << " timed runs\n";
}

StageProfile Summarize(const StageSamples& samples) {
  StageProfile result;
  result.stage = samples.stage;
  result.world_size = 1;
  if (samples.state_share < 1) result.state_share = samples.state_share;
  result.max_micro_batch = samples.max_micro_batch;
  result.collectives = samples.collectives;
  result.collective_elements_in_flight = samples.elements_in_flight;
  for (const auto& [size, runs] : samples.runs) {
    std::vector<double> seconds;
    std::int64_t peak = 0;
    for (const Sample& run : runs) {
      seconds.push_back(run.seconds);
      peak = std::max(peak, run.peak_bytes);
    }
    ProfilePoint point{size, Median(seconds), peak};
    if (const auto replays = samples.replays.find(size); replays != samples.replays.end()) {
      point.graph_compute_s = Median(replays->second);
    }
    result.points.push_back(point);  // std::map: sizes ascending
  }
  if (!samples.optimizer_steps.empty()) result.optimizer_step_s = Median(samples.optimizer_steps);
  if (!samples.half_share_optimizer_steps.empty()) {
    // step(f) = fixed + slope f, measured at f and f / 2.
    const double half = Median(samples.half_share_optimizer_steps);
    result.optimizer_fixed_s = std::clamp(2 * half - result.optimizer_step_s, 0.0, result.optimizer_step_s);
  }
  return result;
}

}  // namespace

void Profile(const ProfileOptions& options) {
  // Checked before measuring, which takes minutes: where the file goes, and its name.
  RequireOutputApart(options.output, {{options.model_config, "the model configuration (--model-config)"}}, "--output");
  if (const std::string problem = DeviceTypeProblem(options.device_type); !problem.empty()) {
    throw InputError("--device-type", "", problem);
  }
  const ModelConfig config = LoadModelConfigOrFolder(options.model_config);
  const torch::Device device = SetUpDevice(options.device, 0);
  std::int64_t capacity = MemoryCapacity(device);
  if (capacity == 0) capacity = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);

  DeviceProfile profile;
  profile.device_type = options.device_type;
  profile.memory_bytes = capacity;
  profile.emulated = !device.is_cuda();
  profile.bf16 = ComputesInBf16(device);
  profile.source =
      device.is_cuda()
          ? "measured by poplar-worker profile on " + DeviceDescription(device) + "; libtorch " + TORCH_VERSION
          : "measured by poplar-worker profile on CPU, emulated device: " + std::to_string(torch::get_num_threads()) +
                " threads, slowdown " + std::to_string(options.device.slowdown) +
                (options.device.gflops > 0 ? ", " + ShortestText(options.device.gflops) + " GFLOP/s" : "") +
                ", memory cap " + std::to_string(options.device.memory_bytes) + " bytes; libtorch " + TORCH_VERSION;
  profile.model = {std::string(ArchitectureName(config.arch)) + "-" + std::to_string(config.n_layer) + "x" +
                       std::to_string(config.n_embd),
                   config.ParameterCount(), ParseWorkerPrecision(options.precision, "--precision"), config};
  DistributedEnv alone;
  Communicator communicator(alone, std::chrono::seconds(10), device);
  // Pass 1 measures each stage alone and finds what fits; passes 2..repeats measure the
  // stages again in turn, in a rotating order. Each point is the median over the passes,
  // so a machine whose speed drifts over seconds (a shared host) slows every stage alike
  // rather than favouring the stage that happened to be measured in a quiet moment,
  // which the planner would then pick for its luck (a winner's curse).
  std::vector<StageSamples> samples;
  // The device's memory, in the words of where it was set: an emulated cap is a flag.
  const std::string memory =
      std::to_string(capacity) + " bytes" + (options.device.memory_bytes > 0 ? " (--memory-bytes)" : "");
  for (int stage : options.stages) {
    // Stages 1-3 a device cannot measure holding the whole state it measures holding
    // half of it, a quarter, ... down to kLeastProfiledShare.
    for (double share = 1;; share /= 2) {
      std::optional<StageSamples> fitted;
      try {
        fitted = FitStage(config, stage, share, options, communicator, device);
      } catch (const c10::OutOfMemoryError&) {
        // Before any micro-batch: the model and its optimizer state alone (Measure
        // recovers from what a micro-batch runs out of).
      }
      if (fitted && !fitted->runs.empty()) {
        samples.push_back(std::move(*fitted));
        MeasureHalfShareOptimizer(samples.back(), config, options, communicator, device);
        break;
      }
      if (stage == 0 || share <= kLeastProfiledShare) {
        const std::string where = " at stage " + std::to_string(stage) +
                                  (share < 1 ? " holding " + HeldShareText(share) + " of the partitioned state" : "");
        throw InputError(options.model_config, "",
                         fitted ? "not even one sample fits in " + memory + where
                                : "the model does not fit in " + memory + where + ": its states alone need more");
      }
      ReleaseCachedMemory(device);
      std::cerr << "poplar-worker profile: stage " << stage << ": nothing fits holding " << HeldShareText(share)
                << " of the partitioned state; measuring with " << HeldShareText(share / 2) << "\n";
    }
  }
  for (int pass = 2; pass <= options.repeats; ++pass) {
    for (std::size_t i = 0; i < samples.size(); ++i) {
      RemeasureStage(samples[(i + pass - 1) % samples.size()], pass, config, options, communicator, device);
    }
  }
  for (const StageSamples& stage : samples) profile.stages.push_back(Summarize(stage));
  WriteFileAtomically(options.output, ProfileToJson(profile));
  std::cerr << "poplar-worker profile: wrote " << options.output << "\n";
}

}  // namespace poplar
