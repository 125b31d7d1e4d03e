#include "launcher/zero_engine.h"

namespace poplar {

ZeroEngine::ZeroEngine(Gpt model, int stage, Communicator& communicator, const AdamWOptions& options,
                       std::int64_t bucket_elements)
    : ShardedAdamW(FlatLayout(FlatLayout::BucketsOf(model->NamedParameters(), bucket_elements),
                              communicator.world_size(), communicator.rank(), stage >= 1),
                   communicator, options, model->wte->weight.device()),
      model_(std::move(model)),
      stage_(stage) {
  TORCH_CHECK(stage >= 0 && stage <= 2, "ZeroEngine runs stages 0-2, got ", stage);
  torch::NoGradGuard no_grad;
  flat_parameters_ = Zeros(layout_.total());
  if (stage_ <= 1) flat_gradients_ = Zeros(layout_.total());
  if (stage_ == 2) gradient_shard_ = Zeros(layout_.shard_total());
  for (const FlatSlot& slot : layout_.slots()) {
    auto parameter = slot.parameter;
    auto view = flat_parameters_.narrow(0, slot.offset, slot.numel).view(parameter.sizes());
    view.copy_(parameter);
    parameter.set_data(view);
    if (stage_ <= 1) {
      parameter.mutable_grad() = flat_gradients_.narrow(0, slot.offset, slot.numel).view(parameter.sizes());
    }
  }
}

double ZeroEngine::MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) {
  auto loss = model_->LossSum(inputs, targets);
  loss.backward();
  return loss.item<double>();
}

void ZeroEngine::EndRound(bool /*computed*/) {
  if (stage_ != 2) return;
  torch::NoGradGuard no_grad;
  for (const FlatBucket& bucket : layout_.buckets()) {
    auto buffer = Zeros(bucket.size);
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      const auto& gradient = slot.parameter.grad();
      if (gradient.defined()) buffer.narrow(0, slot.offset - bucket.begin, slot.numel).copy_(gradient.view({-1}));
    }
    auto reduced = Zeros(bucket.owned_size);
    communicator_.ReduceScatterSum(buffer, reduced);
    gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size).add_(reduced);
  }
  // The full gradients are freed: only the owned shard persists between rounds.
  for (const FlatSlot& slot : layout_.slots()) {
    auto parameter = slot.parameter;
    parameter.mutable_grad() = torch::Tensor();
  }
}

torch::Tensor ZeroEngine::OwnedGradient(const FlatBucket& bucket) {
  if (stage_ == 2) return gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size);
  return flat_gradients_.narrow(0, bucket.owned_begin, bucket.owned_size);
}

torch::Tensor ZeroEngine::OwnedParameters(const FlatBucket& bucket) {
  return flat_parameters_.narrow(0, bucket.owned_begin, bucket.owned_size);
}

double ZeroEngine::Step(double token_count) {
  torch::NoGradGuard no_grad;
  for (const FlatBucket& bucket : layout_.buckets()) {
    auto all = flat_gradients_.defined() ? flat_gradients_.narrow(0, bucket.begin, bucket.size) : torch::Tensor();
    if (stage_ == 0) {
      communicator_.AllReduceSum(all);
    } else if (stage_ == 1) {
      auto owned = OwnedGradient(bucket);
      communicator_.ReduceScatterSum(all, owned);
    }
  }
  const double norm = ScaleClipAndUpdate(token_count);
  if (stage_ >= 1) {
    for (const FlatBucket& bucket : layout_.buckets()) {
      auto whole = flat_parameters_.narrow(0, bucket.begin, bucket.size);
      communicator_.AllGather(OwnedParameters(bucket).clone(), whole);
    }
  }
  if (stage_ <= 1) flat_gradients_.zero_();
  if (stage_ == 2) gradient_shard_.zero_();
  return norm;
}

}  // namespace poplar
