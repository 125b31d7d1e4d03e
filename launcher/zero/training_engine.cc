#include "launcher/zero/training_engine.h"

#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <utility>

#include "launcher/device/counting_allocator.h"
#include "launcher/device/device.h"
#include "launcher/zero/zero3_engine.h"
#include "launcher/zero/zero_engine.h"
#include "planner/base/input_error.h"

namespace poplar {

torch::ScalarType ComputingType(const std::string& worker_precision, torch::Device device, const std::string& key) {
  const torch::ScalarType type = WorkingType(worker_precision, key);
#if TORCH_VERSION_MAJOR < 2
  if (type == torch::kHalf && device.is_cpu()) {
    throw InputError(key, "",
                     "fp16 on the CPU needs libtorch 2 or newer (this worker has libtorch " TORCH_VERSION
                     ", with no fp16 matrix product on the CPU): use bf16 or fp32 here, fp16 on a GPU");
  }
#endif
  return type;
}

void TrainingEngine::CountLocalGradient(const torch::Tensor& gradient) {
  if (!count_local_norms_) return;
  const auto start = std::chrono::steady_clock::now();
  const auto norm_sq = at::linalg_vector_norm(gradient, 2, c10::nullopt, false, torch::kFloat).square();
  period_norm_sq_ = period_norm_sq_.defined() ? period_norm_sq_ + norm_sq : norm_sq;
  norm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double TrainingEngine::TakeLocalNormSeconds() { return std::exchange(norm_seconds_, 0.0); }

void TrainingEngine::EndLocalPeriod() {
  if (!count_local_norms_) return;
  period_norms_.push_back(period_norm_sq_.defined() ? period_norm_sq_ : torch::zeros({}, torch::kFloat));
  period_norm_sq_ = torch::Tensor();
}

std::vector<double> TrainingEngine::TakeLocalNorms() {
  std::vector<double> norms;
  if (period_norms_.empty()) return norms;
  std::vector<torch::Tensor> on_host;
  for (const auto& norm : period_norms_) on_host.push_back(norm.to(torch::kCPU));
  period_norms_.clear();
  const auto all = torch::stack(on_host).to(torch::kDouble);  // one wait for the device
  for (int i = 0; i < all.numel(); ++i) norms.push_back(all[i].item<double>());
  return norms;
}

std::unique_ptr<TrainingEngine> MakeEngine(int stage, Decoder model, Communicator& communicator,
                                           const AdamWOptions& options, std::int64_t bucket_elements,
                                           torch::ScalarType working, const std::vector<double>& state_shares) {
  if (stage == 3) return std::make_unique<Zero3Engine>(std::move(model), communicator, options, working, state_shares);
  return std::make_unique<ZeroEngine>(std::move(model), stage, communicator, options, bucket_elements, working,
                                      state_shares);
}

ShardedAdamW::ShardedAdamW(FlatLayout layout, Communicator& communicator, const AdamWOptions& options,
                           torch::Device device, torch::ScalarType working, std::optional<TiedHead> tied)
    : layout_(std::move(layout)),
      communicator_(communicator),
      options_(options),
      device_(device),
      working_(working),
      tied_(std::move(tied)),
      backward_scale_(torch::ones({}, torch::TensorOptions().dtype(torch::kFloat32).device(device))) {
  exp_avg_ = Zeros(layout_.shard_total());
  exp_avg_sq_ = Zeros(layout_.shard_total());
  if (Mixed()) master_ = Zeros(layout_.shard_total());
}

torch::Tensor ShardedAdamW::Zeros(std::int64_t elements) const {
  return torch::zeros({elements}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
}

torch::Tensor ShardedAdamW::WorkingZeros(std::int64_t elements) const {
  return torch::zeros({elements}, torch::TensorOptions().dtype(working_).device(device_));
}

torch::Tensor ShardedAdamW::WorkingEmpty(std::int64_t elements) const {
  return torch::empty({elements}, torch::TensorOptions().dtype(working_).device(device_));
}

void ShardedAdamW::CopyOwned(torch::Tensor target, const FlatBucket& bucket, const FlatSlot& slot,
                             const torch::Tensor& values) const {
  const auto [begin, end] = layout_.OwnedRange(bucket, slot);
  if (begin >= end) return;
  target.narrow(0, bucket.shard_offset + (begin - bucket.owned_begin), end - begin)
      .copy_(values.detach().reshape({-1}).narrow(0, begin - slot.offset, end - begin));
}

void ShardedAdamW::InitMaster(const FlatBucket& bucket, const FlatSlot& slot, const torch::Tensor& values) {
  if (Mixed()) CopyOwned(master_, bucket, slot, values);
}

StateDict ShardedAdamW::MasterState(bool keep) {
  torch::NoGradGuard no_grad;
  torch::Tensor full = master_;
  if (Partitioned()) {
    full = Zeros(layout_.total());
    for (const FlatBucket& bucket : layout_.buckets()) {
      auto whole = full.narrow(0, bucket.begin, bucket.size);
      communicator_.AllGather(master_.narrow(0, bucket.shard_offset, bucket.owned_size), whole, bucket.slices);
    }
  }
  StateDict state;
  if (!keep) return state;
  const CountingAllocator::HostMemory host;  // a GPU's copies are in the host's RAM
  for (const FlatSlot& slot : layout_.slots()) {
    state[slot.name] = full.narrow(0, slot.offset, slot.numel).view(slot.shape).cpu().clone();
  }
  AddTiedHead(tied_, state);
  return state;
}

double ShardedAdamW::ScaleClipAndUpdate(double divisor) {
  torch::NoGradGuard no_grad;
  // The owned gradients, still summed over tokens: the norm of g / t is norm(g) / t, so
  // scaling and clipping are one multiplication per element, below. Their squares are
  // summed in fp32 straight from the working precision: no fp32 copy of every gradient
  // at once (4 bytes a parameter beside the model states, which with CUDA graphs could
  // not reuse the activations' freed memory); the update takes one bucket's at a time.
  auto squares = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (const FlatBucket& bucket : layout_.buckets()) {
    squares += at::linalg_vector_norm(OwnedGradient(bucket), 2, at::OptionalIntArrayRef(), false, torch::kFloat32)
                   .to(torch::kFloat64)
                   .square();
  }
  if (Partitioned()) communicator_.AllReduceSum(squares);
  const double norm = std::sqrt(squares.item<double>()) / divisor;
  if (!std::isfinite(norm)) return norm;  // skipped: the caller's loss scaler backs off
  const double scale = ClipCoefficient(norm, options_.grad_clip) / divisor;

  ++step_;
  AdamWOptions options = options_;
  options.lr = learning_rate_ = LearningRateAt(options_.schedule, options_.lr, step_) * learning_rate_factor_;
  for (std::size_t b = 0; b < layout_.buckets().size(); ++b) {
    const FlatBucket& bucket = layout_.buckets()[b];
    // fp32, in place when the working precision is fp32.
    auto gradient = Mixed() ? OwnedGradient(bucket).to(torch::kFloat32) : OwnedGradient(bucket);
    gradient.mul_(scale);
    auto parameters = Mixed() ? master_.narrow(0, bucket.shard_offset, bucket.owned_size) : OwnedParameters(bucket);
    AdamWStep(parameters, gradient, exp_avg_.narrow(0, bucket.shard_offset, bucket.owned_size),
              exp_avg_sq_.narrow(0, bucket.shard_offset, bucket.owned_size), bucket.owned_decay, options, step_);
    if (Mixed()) OwnedParameters(bucket).copy_(parameters);
  }
  Synchronize(device_);  // on a GPU the update is queued: Step() returns it done, so callers can time it
  return norm;
}

std::map<std::string, AdamMoments> ShardedAdamW::GatherMoments(bool keep) {
  torch::NoGradGuard no_grad;
  torch::Tensor full_avg = exp_avg_, full_avg_sq = exp_avg_sq_;
  if (Partitioned()) {
    full_avg = Zeros(layout_.total());
    full_avg_sq = Zeros(layout_.total());
    for (const FlatBucket& bucket : layout_.buckets()) {
      auto avg_out = full_avg.narrow(0, bucket.begin, bucket.size);
      auto avg_sq_out = full_avg_sq.narrow(0, bucket.begin, bucket.size);
      communicator_.AllGather(exp_avg_.narrow(0, bucket.shard_offset, bucket.owned_size), avg_out, bucket.slices);
      communicator_.AllGather(exp_avg_sq_.narrow(0, bucket.shard_offset, bucket.owned_size), avg_sq_out, bucket.slices);
    }
  }
  std::map<std::string, AdamMoments> moments;
  if (!keep) return moments;
  const CountingAllocator::HostMemory host;  // a GPU's copies are in the host's RAM
  for (const FlatSlot& slot : layout_.slots()) {
    moments[slot.name] = {full_avg.narrow(0, slot.offset, slot.numel).view(slot.shape).cpu().clone(),
                          full_avg_sq.narrow(0, slot.offset, slot.numel).view(slot.shape).cpu().clone()};
  }
  return moments;
}

void ShardedAdamW::LoadMoments(const std::map<std::string, AdamMoments>& moments, std::int64_t step) {
  torch::NoGradGuard no_grad;
  for (const FlatBucket& bucket : layout_.buckets()) {
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      const auto loaded = moments.find(slot.name);
      if (loaded == moments.end()) continue;
      CopyOwned(exp_avg_, bucket, slot, loaded->second.exp_avg);
      CopyOwned(exp_avg_sq_, bucket, slot, loaded->second.exp_avg_sq);
    }
  }
  step_ = step;
}

}  // namespace poplar
