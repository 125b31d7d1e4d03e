#include "launcher/train.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include <torch/cuda.h>

#include "launcher/checkpoint.h"
#include "launcher/communicator.h"
#include "launcher/counting_allocator.h"
#include "launcher/gpt.h"
#include "launcher/model_config.h"
#include "launcher/state_dict.h"
#include "launcher/token_data.h"
#include "planner/input_error.h"
#include "planner/worker_plan.h"

namespace poplar {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One JSON object per line, flushed per step, so a reader can follow a running job.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& pattern, int rank, bool append) {
    const auto placeholder = pattern.find("{rank}");
    if (pattern.empty() || (placeholder == std::string::npos && rank != 0)) return;
    std::string path = pattern;
    if (placeholder != std::string::npos) path.replace(placeholder, 6, std::to_string(rank));
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw InputError("--metrics", "", "cannot write " + path);
  }
  void Write(const nlohmann::json& line) {
    if (out_.is_open()) out_ << line.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

// Compute of one micro-batch: forward, backward, and for an emulated slower device the
// extra wall time. Returns the loss summed over its tokens.
double RunMicroBatch(Gpt& model, const TokenData& data, std::int64_t first, int size,
                     double slowdown, torch::Device device) {
  const auto start = Clock::now();
  auto [inputs, targets] = data.Batch(first, size);
  auto loss = model->LossSum(inputs.to(device), targets.to(device));
  loss.backward();
  const double value = loss.item<double>();  // also waits for the device
  if (slowdown > 1.0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(SecondsSince(start) * (slowdown - 1.0)));
  }
  return value;
}

}  // namespace

void Train(const TrainOptions& options) {
  CountingAllocator::Install();
  CountingAllocator::SetCapacity(options.memory_limit);
  const DistributedEnv env = DistributedEnv::FromEnvironment();
  torch::Device device = torch::kCPU;
  if (options.device == "cuda") {
    if (!torch::cuda::is_available()) {
      throw InputError("--device", "", "cuda is not available: no GPU, or a libtorch built without "
                                       "CUDA (docs/operations.md says how to build against one)");
    }
    device = torch::Device(torch::kCUDA, env.local_rank % static_cast<int>(torch::cuda::device_count()));
  }
  if (options.threads > 0) torch::set_num_threads(options.threads);

  const WorkerPlan plan = LoadWorkerPlan(options.plan);
  RequireWorldSize(plan, env.world_size);
  if (plan.stage > 2) {
    throw InputError(options.plan, "stage", "stage 3 is not supported by this worker yet (stages 0-2)");
  }
  const GptConfig config = LoadModelConfig(options.model_config);
  const TokenData data(options.data, config.block_size, config.vocab_size);
  std::optional<Checkpoint> resumed;
  if (!options.resume.empty()) resumed = ReadCheckpoint(options.resume, config);
  const StateDict initial = options.init.empty() ? StateDict{} : ReadStateDict(options.init);

  const std::int64_t baseline_bytes = CountingAllocator::InUse();
  torch::manual_seed(options.seed);
  Gpt model(config);
  if (!options.init.empty()) LoadModelState(model, initial, options.init);
  if (resumed) LoadModelState(model, resumed->model, options.resume);
  model->to(device);

  Communicator communicator(env, std::chrono::seconds(options.timeout_s), device);
  const auto bucket_elements = static_cast<std::int64_t>(options.bucket_mb * (1 << 20) / 4);
  ZeroEngine engine(model->NamedParameters(), plan.stage, communicator, options.adamw,
                    std::max<std::int64_t>(1, bucket_elements));
  std::int64_t first_step = 0;
  if (resumed) {
    engine.LoadMoments(resumed->moments, resumed->step);
    first_step = resumed->step;
  }

  MetricsWriter metrics(options.metrics, env.rank, resumed.has_value());
  const int rank = env.rank;
  const std::vector<int>& micro_batches = plan.micro_batches[rank];
  const std::int64_t offset = plan.RankOffset(rank);
  const double tokens_per_step = static_cast<double>(plan.global_batch) * config.block_size;
  if (rank == 0 && options.log_every > 0) {
    std::cerr << "poplar-worker[rank 0]: " << env.world_size << " ranks, ZeRO stage " << plan.stage
              << ", global batch " << plan.global_batch << ", " << config.ParameterCount()
              << " parameters, steps " << first_step << ".." << options.steps << "\n";
  }

  for (std::int64_t step = first_step; step < options.steps; ++step) {
    const auto step_start = Clock::now();
    const double communication_before = communicator.communication_seconds();
    const double optimizer_before = engine.optimizer_seconds();
    CountingAllocator::ResetPeak();
    double loss_sum = 0;
    double compute_s = 0;
    std::int64_t first = step * plan.global_batch + offset;
    for (int size : micro_batches) {
      if (size > 0) {
        const auto compute_start = Clock::now();
        loss_sum += RunMicroBatch(model, data, first, size, options.slowdown, device);
        compute_s += SecondsSince(compute_start);
        first += size;
      }
      engine.FinishRound();
    }
    const double grad_norm = engine.Step(tokens_per_step);
    auto loss = torch::tensor({loss_sum}, torch::kFloat64).to(device);
    communicator.AllReduceSum(loss);
    const double mean_loss = loss.item<double>() / tokens_per_step;  // waits for the device
    const double step_s = SecondsSince(step_start);

    metrics.Write({{"step", step + 1},
                   {"rank", rank},
                   {"world_size", env.world_size},
                   {"stage", plan.stage},
                   {"loss", mean_loss},
                   {"grad_norm", grad_norm},
                   {"step_s", step_s},
                   {"compute_s", compute_s},
                   {"communication_s", communicator.communication_seconds() - communication_before},
                   {"optimizer_s", engine.optimizer_seconds() - optimizer_before},
                   {"samples", std::accumulate(micro_batches.begin(), micro_batches.end(), 0)},
                   {"samples_per_s", plan.global_batch / step_s},
                   {"tokens_per_s", tokens_per_step / step_s},
                   {"peak_bytes", CountingAllocator::Peak() - baseline_bytes},
                   {"state_bytes", CountingAllocator::InUse() - baseline_bytes}});
    if (rank == 0 && options.log_every > 0 && ((step + 1) % options.log_every == 0 || step + 1 == options.steps)) {
      std::fprintf(stderr, "poplar-worker[rank 0]: step %lld loss %.4f grad norm %.3f %.1f samples/s\n",
                   static_cast<long long>(step + 1), mean_loss, grad_norm, plan.global_batch / step_s);
    }
    const bool last = step + 1 == options.steps;
    if (!options.checkpoint_dir.empty() &&
        (last || (options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0))) {
      Checkpoint checkpoint{step + 1, {}, engine.GatherMoments()};
      if (rank == 0) {
        checkpoint.model = ModelStateDict(model);
        WriteCheckpoint(options.checkpoint_dir, checkpoint, config);
      }
      communicator.Barrier();
    }
  }
  if (!options.save.empty() && rank == 0) WriteStateDict(options.save, ModelStateDict(model));
  communicator.Barrier();
}

}  // namespace poplar
