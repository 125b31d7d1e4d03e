#include "launcher/profile_mode.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include <unistd.h>

#include "launcher/communicator.h"
#include "launcher/counting_allocator.h"
#include "launcher/device.h"
#include "launcher/stopwatch.h"
#include "launcher/gpt.h"
#include "launcher/training_engine.h"
#include "planner/input_error.h"
#include "planner/profile.h"
#include "planner/text_file.h"

namespace poplar {
namespace {

// One device's model, engine and the measurements for one stage.
class StageProfiler {
 public:
  StageProfiler(const GptConfig& config, int stage, const ProfileOptions& options,
                Communicator& communicator, torch::Device device)
      : config_(config), options_(options), device_(device), model_(nullptr) {
    torch::manual_seed(options.seed);
    model_ = Gpt(config);
    model_->to(device);
    engine_ = MakeEngine(stage, model_, communicator, AdamWOptions{}, BucketElements(0, device),
                         WorkingType(ParseWorkerPrecision(options.precision, "--precision")));
  }

  // Median time and peak bytes of a micro-batch of `size`, or nullopt if it does not fit.
  std::optional<ProfilePoint> Measure(int size) {
    std::vector<double> times;
    std::int64_t peak = 0;
    try {
      for (int run = 0; run <= options_.repeats; ++run) {  // run 0 warms up
        auto inputs = torch::randint(config_.vocab_size, {size, config_.block_size},
                                     torch::TensorOptions(torch::kLong).device(device_));
        Synchronize(device_);
        ResetMemoryPeak(device_);
        const auto start = Clock::now();
        // Not the last micro-batch: gradients accumulate; stages 2-3 reduce per round.
        // MicroBatch returns the loss as a number, so the device is done when it returns.
        engine_->MicroBatch(inputs, inputs, /*last=*/false);
        double elapsed = SecondsSince(start);
        if (options_.slowdown > 1.0) {
          std::this_thread::sleep_for(std::chrono::duration<double>(elapsed * (options_.slowdown - 1.0)));
          elapsed *= options_.slowdown;
        }
        engine_->EndRound(true);
        peak = std::max(peak, MemoryPeak(device_));
        if (run > 0) times.push_back(elapsed);
      }
    } catch (const c10::OutOfMemoryError&) {
      // The activations unwound with the exception; hand the cache back so that the
      // next, smaller size is measured on an unfragmented device.
      ReleaseCachedMemory(device_);
      return std::nullopt;
    } catch (const c10::Error& error) {
      // Out of memory outside the caching allocator (a cuBLAS workspace, a kernel
      // launch) is a plain c10::Error: also "does not fit", anything else is not.
      const std::string what = error.what();
      if (what.find("out of memory") == std::string::npos && what.find("ALLOC_FAILED") == std::string::npos) {
        throw;
      }
      ReleaseCachedMemory(device_);
      return std::nullopt;
    }
    std::sort(times.begin(), times.end());
    return ProfilePoint{size, times[times.size() / 2], peak};
  }

  // The optimizer step as training takes it: after a last micro-batch (here of one
  // sample) has left real gradients, each time; only Step() is timed.
  double OptimizerStepSeconds() {
    std::vector<double> times;
    engine_->Step(1.0);  // clears what the measurements accumulated
    for (int run = 0; run <= options_.repeats; ++run) {  // run 0 warms up
      auto inputs = torch::randint(config_.vocab_size, {1, config_.block_size},
                                   torch::TensorOptions(torch::kLong).device(device_));
      engine_->MicroBatch(inputs, inputs, /*last=*/true);
      engine_->EndRound(true);
      Synchronize(device_);
      const auto start = Clock::now();
      engine_->Step(static_cast<double>(config_.block_size));
      Synchronize(device_);
      if (run == 0) continue;
      times.push_back(SecondsSince(start) * std::max(1.0, options_.slowdown));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  const GptConfig& config_;
  const ProfileOptions& options_;
  torch::Device device_;
  Gpt model_;
  std::unique_ptr<TrainingEngine> engine_;
};

StageProfile ProfileStage(const GptConfig& config, int stage, const ProfileOptions& options,
                          Communicator& communicator, torch::Device device) {
  StageProfile result;
  result.stage = stage;
  result.world_size = 1;
  StageProfiler profiler(config, stage, options, communicator, device);
  int fits = 0;
  int fails = 0;
  for (int size = 1; size <= options.largest_micro_batch; size *= 2) {
    auto point = profiler.Measure(size);
    if (!point) {
      fails = size;
      break;
    }
    result.points.push_back(*point);
    fits = size;
  }
  // Largest size that fits, between the last that did and the first that did not.
  if (fails > 0) {
    int low = fits, high = fails;
    while (high - low > 1) {
      const int middle = low + (high - low) / 2;
      auto point = profiler.Measure(middle);
      if (point) {
        low = middle;
        result.points.push_back(*point);
      } else {
        high = middle;
      }
    }
    fits = low;
  }
  std::sort(result.points.begin(), result.points.end(),
            [](const ProfilePoint& a, const ProfilePoint& b) { return a.micro_batch < b.micro_batch; });
  result.max_micro_batch = fits;
  if (fits > 0) result.optimizer_step_s = profiler.OptimizerStepSeconds();
  std::cerr << "poplar-worker profile: stage " << stage << ": largest micro-batch " << fits << ", "
            << result.points.size() << " points\n";
  return result;
}

}  // namespace

void Profile(const ProfileOptions& options) {
  CountingAllocator::Install();
  if (options.threads > 0) torch::set_num_threads(options.threads);
  const GptConfig config = LoadModelConfig(options.model_config);
  const torch::Device device = SelectDevice(options.device, 0);
  if (device.is_cuda() && (options.memory_bytes > 0 || options.slowdown > 1.0)) {
    throw InputError(options.memory_bytes > 0 ? "--memory-bytes" : "--slowdown", "",
                     "emulates a device on the CPU; a GPU is measured as it is");
  }
  CountingAllocator::SetCapacity(options.memory_bytes);
  std::int64_t capacity = MemoryCapacity(device);
  if (capacity == 0) capacity = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);

  DeviceProfile profile;
  profile.device_type = options.device_type;
  profile.memory_bytes = capacity;
  profile.emulated = !device.is_cuda();
  profile.source = device.is_cuda()
                       ? "measured by poplar-worker profile on " + DeviceDescription(device) +
                             "; libtorch " + TORCH_VERSION
                       : "measured by poplar-worker profile on CPU, emulated device: " +
                             std::to_string(options.threads > 0 ? options.threads : torch::get_num_threads()) +
                             " threads, slowdown " + std::to_string(options.slowdown) + ", memory cap " +
                             std::to_string(options.memory_bytes) + " bytes; libtorch " + TORCH_VERSION;
  profile.model = {"gpt-" + std::to_string(config.n_layer) + "x" + std::to_string(config.n_embd),
                   config.ParameterCount(), ParseWorkerPrecision(options.precision, "--precision")};
  DistributedEnv alone;
  Communicator communicator(alone, std::chrono::seconds(10), device);
  for (int stage : options.stages) {
    StageProfile measured = ProfileStage(config, stage, options, communicator, device);
    if (measured.points.empty()) {
      throw InputError(options.model_config, "",
                       "not even one sample fits in " + std::to_string(capacity) +
                           " bytes at stage " + std::to_string(stage));
    }
    profile.stages.push_back(std::move(measured));
  }
  WriteFileAtomically(options.output, ProfileToJson(profile));
  std::cerr << "poplar-worker profile: wrote " << options.output << "\n";
}

}  // namespace poplar
