#include "launcher/zero_engine.h"

#include <chrono>
#include <cmath>

namespace poplar {
namespace {


}  // namespace

ZeroEngine::ZeroEngine(std::vector<std::pair<std::string, torch::Tensor>> parameters, int stage,
                       Communicator& communicator, AdamWOptions options,
                       std::int64_t bucket_elements)
    : stage_(stage), communicator_(communicator), options_(options) {
  TORCH_CHECK(stage >= 0 && stage <= 2, "ZeroEngine supports stages 0-2, got ", stage);
  TORCH_CHECK(!parameters.empty(), "ZeroEngine needs parameters");
  device_ = parameters.front().second.device();
  const int world = communicator.world_size();
  const int rank = communicator.rank();

  // Buckets of whole parameters, each padded to a multiple of the world size.
  std::int64_t offset = 0;
  for (auto& [name, parameter] : parameters) {
    TORCH_CHECK(parameter.scalar_type() == torch::kFloat32, name, " is not fp32");
    if (buckets_.empty() || offset - buckets_.back().begin >= bucket_elements) {
      if (!buckets_.empty()) {
        Bucket& last = buckets_.back();
        last.size = (offset - last.begin + world - 1) / world * world;
        offset = last.begin + last.size;
      }
      buckets_.push_back({offset});
    }
    Slot slot{name, parameter, offset, parameter.numel(), parameter.dim() >= 2};
    buckets_.back().slots.push_back(static_cast<int>(slots_.size()));
    slots_.push_back(std::move(slot));
    offset += parameter.numel();
  }
  Bucket& last = buckets_.back();
  last.size = (offset - last.begin + world - 1) / world * world;
  const std::int64_t total = last.begin + last.size;

  std::int64_t shard_offset = 0;
  for (Bucket& bucket : buckets_) {
    const bool sharded = stage_ >= 1;
    bucket.owned_size = sharded ? bucket.size / world : bucket.size;
    bucket.owned_begin = bucket.begin + (sharded ? rank * bucket.owned_size : 0);
    bucket.shard_offset = shard_offset;
    shard_offset += bucket.owned_size;
  }

  // Move the parameters into the flat buffer and make them views of it.
  torch::NoGradGuard no_grad;
  flat_parameters_ = Zeros(total);
  if (stage_ <= 1) flat_gradients_ = Zeros(total);
  for (Slot& slot : slots_) {
    auto view = flat_parameters_.narrow(0, slot.offset, slot.numel).view(slot.parameter.sizes());
    view.copy_(slot.parameter);
    slot.parameter.set_data(view);
    if (stage_ <= 1) {
      slot.parameter.mutable_grad() =
          flat_gradients_.narrow(0, slot.offset, slot.numel).view(slot.parameter.sizes());
    }
  }
  if (stage_ == 2) gradient_shard_ = Zeros(shard_offset);
  exp_avg_ = Zeros(shard_offset);
  exp_avg_sq_ = Zeros(shard_offset);
}

void ZeroEngine::FinishRound() {
  if (stage_ != 2) return;
  torch::NoGradGuard no_grad;
  for (const Bucket& bucket : buckets_) {
    auto buffer = Zeros(bucket.size);
    for (int index : bucket.slots) {
      Slot& slot = slots_[index];
      if (slot.parameter.grad().defined()) {
        buffer.narrow(0, slot.offset - bucket.begin, slot.numel).copy_(slot.parameter.grad().view({-1}));
      }
    }
    auto reduced = Zeros(bucket.owned_size);
    communicator_.ReduceScatterSum(buffer, reduced);
    gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size).add_(reduced);
  }
  // The full gradients are freed: only the owned shard persists between rounds.
  for (Slot& slot : slots_) slot.parameter.mutable_grad() = torch::Tensor();
}

torch::Tensor ZeroEngine::OwnedGradient(const Bucket& bucket) {
  if (stage_ == 2) return gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size);
  return flat_gradients_.narrow(0, bucket.owned_begin, bucket.owned_size);
}

double ZeroEngine::Step(double token_count) {
  torch::NoGradGuard no_grad;
  // Sum gradients over ranks into the owned slices.
  for (const Bucket& bucket : buckets_) {
    if (stage_ == 0) {
      auto all = flat_gradients_.narrow(0, bucket.begin, bucket.size);
      communicator_.AllReduceSum(all);
    } else if (stage_ == 1) {
      auto owned = OwnedGradient(bucket);
      communicator_.ReduceScatterSum(flat_gradients_.narrow(0, bucket.begin, bucket.size), owned);
    }
  }
  // Scale once by the global token count, then the global norm over all shards.
  auto squares = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (const Bucket& bucket : buckets_) {
    auto gradient = OwnedGradient(bucket);
    gradient.div_(token_count);
    squares += gradient.to(torch::kFloat64).pow(2).sum();
  }
  if (stage_ >= 1) communicator_.AllReduceSum(squares);
  const double norm = std::sqrt(squares.item<double>());
  double clip_coefficient = 1.0;
  if (options_.grad_clip > 0) {
    clip_coefficient = std::min(1.0, options_.grad_clip / (norm + 1e-6));
  }

  const auto start = std::chrono::steady_clock::now();
  ApplyAdamW(clip_coefficient);
  optimizer_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (stage_ >= 1) {
    for (const Bucket& bucket : buckets_) {
      auto gathered = flat_parameters_.narrow(0, bucket.begin, bucket.size);
      communicator_.AllGather(flat_parameters_.narrow(0, bucket.owned_begin, bucket.owned_size).clone(),
                              gathered);
    }
  }
  if (stage_ <= 1) flat_gradients_.zero_();
  if (stage_ == 2) gradient_shard_.zero_();
  return norm;
}

void ZeroEngine::ApplyAdamW(double clip_coefficient) {
  ++step_;
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  const double step_size = options_.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const double decay_factor = 1.0 - options_.lr * options_.weight_decay;
  for (const Bucket& bucket : buckets_) {
    auto parameters = flat_parameters_.narrow(0, bucket.owned_begin, bucket.owned_size);
    auto gradient = OwnedGradient(bucket);
    if (clip_coefficient < 1.0) gradient.mul_(clip_coefficient);
    auto exp_avg = exp_avg_.narrow(0, bucket.shard_offset, bucket.owned_size);
    auto exp_avg_sq = exp_avg_sq_.narrow(0, bucket.shard_offset, bucket.owned_size);
    // Decoupled weight decay on the owned part of every parameter of 2+ dimensions.
    for (int index : bucket.slots) {
      const Slot& slot = slots_[index];
      if (!slot.decay || options_.weight_decay == 0) continue;
      const std::int64_t begin = std::max(slot.offset, bucket.owned_begin);
      const std::int64_t end = std::min(slot.offset + slot.numel, bucket.owned_begin + bucket.owned_size);
      if (begin < end) parameters.narrow(0, begin - bucket.owned_begin, end - begin).mul_(decay_factor);
    }
    exp_avg.mul_(options_.beta1).add_(gradient, 1.0 - options_.beta1);
    exp_avg_sq.mul_(options_.beta2).addcmul_(gradient, gradient, 1.0 - options_.beta2);
    auto denominator = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(options_.eps);
    parameters.addcdiv_(exp_avg, denominator, -step_size);
  }
}

torch::Tensor ZeroEngine::Zeros(std::int64_t elements) const {
  return torch::zeros({elements}, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
}

std::map<std::string, AdamMoments> ZeroEngine::GatherMoments() {
  torch::NoGradGuard no_grad;
  torch::Tensor full_avg = exp_avg_, full_avg_sq = exp_avg_sq_;
  if (stage_ >= 1) {
    const std::int64_t total = flat_parameters_.numel();
    full_avg = Zeros(total);
    full_avg_sq = Zeros(total);
    for (const Bucket& bucket : buckets_) {
      auto avg_out = full_avg.narrow(0, bucket.begin, bucket.size);
      auto avg_sq_out = full_avg_sq.narrow(0, bucket.begin, bucket.size);
      communicator_.AllGather(exp_avg_.narrow(0, bucket.shard_offset, bucket.owned_size), avg_out);
      communicator_.AllGather(exp_avg_sq_.narrow(0, bucket.shard_offset, bucket.owned_size), avg_sq_out);
    }
  }
  std::map<std::string, AdamMoments> moments;
  for (const Slot& slot : slots_) {
    moments[slot.name] = {
        full_avg.narrow(0, slot.offset, slot.numel).view(slot.parameter.sizes()).cpu().clone(),
        full_avg_sq.narrow(0, slot.offset, slot.numel).view(slot.parameter.sizes()).cpu().clone()};
  }
  return moments;
}

void ZeroEngine::LoadMoments(const std::map<std::string, AdamMoments>& moments, std::int64_t step) {
  torch::NoGradGuard no_grad;
  for (const Bucket& bucket : buckets_) {
    for (int index : bucket.slots) {
      const Slot& slot = slots_[index];
      const AdamMoments& loaded = moments.at(slot.name);
      const std::int64_t begin = std::max(slot.offset, bucket.owned_begin);
      const std::int64_t end = std::min(slot.offset + slot.numel, bucket.owned_begin + bucket.owned_size);
      if (begin >= end) continue;
      const std::int64_t shard_at = bucket.shard_offset + (begin - bucket.owned_begin);
      exp_avg_.narrow(0, shard_at, end - begin)
          .copy_(loaded.exp_avg.reshape({-1}).narrow(0, begin - slot.offset, end - begin));
      exp_avg_sq_.narrow(0, shard_at, end - begin)
          .copy_(loaded.exp_avg_sq.reshape({-1}).narrow(0, begin - slot.offset, end - begin));
    }
  }
  step_ = step;
}

}  // namespace poplar
