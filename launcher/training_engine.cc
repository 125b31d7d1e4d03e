#include "launcher/training_engine.h"

#include <chrono>
#include <cmath>

#include "launcher/zero3_engine.h"
#include "launcher/zero_engine.h"

namespace poplar {

std::unique_ptr<TrainingEngine> MakeEngine(int stage, Gpt model, Communicator& communicator,
                                           const AdamWOptions& options, std::int64_t bucket_elements) {
  if (stage == 3) return std::make_unique<Zero3Engine>(std::move(model), communicator, options);
  return std::make_unique<ZeroEngine>(std::move(model), stage, communicator, options, bucket_elements);
}

ShardedAdamW::ShardedAdamW(FlatLayout layout, Communicator& communicator, const AdamWOptions& options,
                           torch::Device device)
    : layout_(std::move(layout)),
      communicator_(communicator),
      options_(options),
      device_(device) {
  exp_avg_ = Zeros(layout_.shard_total());
  exp_avg_sq_ = Zeros(layout_.shard_total());
}

torch::Tensor ShardedAdamW::Zeros(std::int64_t elements) const {
  return torch::zeros({elements}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
}

double ShardedAdamW::ScaleClipAndUpdate(double token_count) {
  torch::NoGradGuard no_grad;
  auto squares = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (const FlatBucket& bucket : layout_.buckets()) {
    auto gradient = OwnedGradient(bucket);
    gradient.div_(token_count);
    squares += gradient.to(torch::kFloat64).pow(2).sum();
  }
  if (Partitioned()) communicator_.AllReduceSum(squares);
  const double norm = std::sqrt(squares.item<double>());
  const double clip = ClipCoefficient(norm, options_.grad_clip);

  const auto start = std::chrono::steady_clock::now();
  ++step_;
  for (const FlatBucket& bucket : layout_.buckets()) {
    auto gradient = OwnedGradient(bucket);
    if (clip < 1.0) gradient.mul_(clip);
    AdamWStep(OwnedParameters(bucket), gradient,
              exp_avg_.narrow(0, bucket.shard_offset, bucket.owned_size),
              exp_avg_sq_.narrow(0, bucket.shard_offset, bucket.owned_size), bucket.owned_decay,
              options_, step_);
  }
  optimizer_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
      communicator_.AllGather(exp_avg_.narrow(0, bucket.shard_offset, bucket.owned_size), avg_out);
      communicator_.AllGather(exp_avg_sq_.narrow(0, bucket.shard_offset, bucket.owned_size), avg_sq_out);
    }
  }
  std::map<std::string, AdamMoments> moments;
  if (!keep) return moments;
  for (const FlatSlot& slot : layout_.slots()) {
    moments[slot.name] = {
        full_avg.narrow(0, slot.offset, slot.numel).view(slot.shape).cpu().clone(),
        full_avg_sq.narrow(0, slot.offset, slot.numel).view(slot.shape).cpu().clone()};
  }
  return moments;
}

void ShardedAdamW::LoadMoments(const std::map<std::string, AdamMoments>& moments, std::int64_t step) {
  torch::NoGradGuard no_grad;
  for (const FlatBucket& bucket : layout_.buckets()) {
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      const auto [begin, end] = layout_.OwnedRange(bucket, slot);
      if (begin >= end) continue;
      const AdamMoments& loaded = moments.at(slot.name);
      const std::int64_t at = bucket.shard_offset + (begin - bucket.owned_begin);
      exp_avg_.narrow(0, at, end - begin)
          .copy_(loaded.exp_avg.reshape({-1}).narrow(0, begin - slot.offset, end - begin));
      exp_avg_sq_.narrow(0, at, end - begin)
          .copy_(loaded.exp_avg_sq.reshape({-1}).narrow(0, begin - slot.offset, end - begin));
    }
  }
  step_ = step;
}

}  // namespace poplar
