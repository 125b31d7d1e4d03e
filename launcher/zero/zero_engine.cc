#include "launcher/zero/zero_engine.h"

#include <torch/csrc/autograd/function_hook.h>

#include "launcher/device/counting_allocator.h"

namespace poplar {

// Runs after a parameter's gradient accumulator has added this backward's gradient.
struct GradientReadyHook : public torch::autograd::FunctionPostHook {
  GradientReadyHook(ZeroEngine* engine, int slot) : engine(engine), slot(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    engine->OnGradientReady(slot);
    return outputs;
  }
  ZeroEngine* engine;
  int slot;
};

ZeroEngine::ZeroEngine(Decoder model, int stage, Communicator& communicator, const AdamWOptions& options,
                       std::int64_t bucket_elements, torch::ScalarType working, const std::vector<double>& state_shares)
    : ShardedAdamW(FlatLayout(FlatLayout::BucketsOf(model->NamedParameters(), bucket_elements),
                              LayoutWorldSize(communicator.world_size(), state_shares), communicator.rank(), stage >= 1,
                              state_shares),
                   communicator, options, model->device(), working, model->tied_head()),
      model_(std::move(model)),
      stage_(stage) {
  TORCH_CHECK(stage >= 0 && stage <= 2, "ZeroEngine runs stages 0-2, got ", stage);
  torch::NoGradGuard no_grad;
  // The gradient buffers come after the parameters have moved into the flat buffer (each
  // parameter's own storage is freed as it moves): the model's parameters and both flat
  // buffers are never held at once, so that construction peaks no higher than training.
  flat_parameters_ = WorkingZeros(layout_.total());
  for (const FlatBucket& bucket : layout_.buckets()) {
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      auto parameter = slot.parameter;
      InitMaster(bucket, slot, parameter);  // from the fp32 values, before conversion
      auto view = flat_parameters_.narrow(0, slot.offset, slot.numel).view(slot.shape);
      view.copy_(parameter);
      parameter.set_data(view);
    }
  }
  if (stage_ <= 1) {
    flat_gradients_ = WorkingZeros(layout_.total());
    for (const FlatSlot& slot : layout_.slots()) {
      slot.parameter.mutable_grad() = flat_gradients_.narrow(0, slot.offset, slot.numel).view(slot.shape);
    }
  }
  if (stage_ == 2) gradient_shard_ = WorkingZeros(layout_.shard_total());
  slot_bucket_.resize(layout_.slots().size());
  for (int b = 0; b < static_cast<int>(layout_.buckets().size()); ++b) {
    for (int index : layout_.buckets()[b].slots) slot_bucket_[index] = b;
  }
  for (int index = 0; index < static_cast<int>(layout_.slots().size()); ++index) {
    auto accumulator = torch::autograd::impl::grad_accumulator(layout_.slots()[index].parameter);
    accumulator->add_post_hook(std::make_unique<GradientReadyHook>(this, index));
    accumulators_.push_back(std::move(accumulator));
  }
  pending_.resize(layout_.buckets().size());
  reduced_.resize(layout_.buckets().size());
}

void ZeroEngine::BeginReduction() {
  reducing_ = true;
  waiting_.clear();
  for (const FlatBucket& bucket : layout_.buckets()) waiting_.push_back(static_cast<int>(bucket.slots.size()));
  next_launch_ = static_cast<int>(layout_.buckets().size()) - 1;
}

void ZeroEngine::OnGradientReady(int slot) {
  if (!hooks_armed_) return;
  --waiting_[slot_bucket_[slot]];
  LaunchBuckets(false);
}

void ZeroEngine::LaunchBuckets(bool all) {
  while (next_launch_ >= 0 && (all || waiting_[next_launch_] <= 0)) Launch(next_launch_--);
}

void ZeroEngine::Launch(int b) {
  torch::NoGradGuard no_grad;
  const FlatBucket& bucket = layout_.buckets()[b];
  if (stage_ <= 1) {
    auto all = flat_gradients_.narrow(0, bucket.begin, bucket.size);
    CountLocalGradient(all);
    if (stage_ == 0) {
      pending_[b] = communicator_.StartAllReduceSum(all);
    } else {
      auto owned = OwnedGradient(bucket);
      pending_[b] = communicator_.StartReduceScatterSum(all, owned, bucket.slices);
    }
    return;
  }
  // Stage 2: this round's gradients of the bucket, then freed.
  auto buffer = WorkingZeros(bucket.size);
  for (int index : bucket.slots) {
    auto parameter = layout_.slots()[index].parameter;
    if (parameter.grad().defined()) {
      buffer.narrow(0, layout_.slots()[index].offset - bucket.begin, layout_.slots()[index].numel)
          .copy_(parameter.grad().view({-1}));
    }
    parameter.mutable_grad() = torch::Tensor();
  }
  CountLocalGradient(buffer);
  reduced_[b] = WorkingEmpty(bucket.owned_size);
  pending_[b] = communicator_.StartReduceScatterSum(buffer, reduced_[b], bucket.slices);
  // Buckets start from the last down, so those above b + kReductionsInFlight - 1 are the
  // oldest in flight.
  for (int older = b + kReductionsInFlight; older < static_cast<int>(pending_.size()); ++older) {
    if (pending_[older]) FinishBucket(older);
  }
}

void ZeroEngine::FinishBucket(int b) {
  pending_[b]->Wait();
  pending_[b].reset();  // releases the bucket's whole gradient
  if (stage_ == 2) {
    const FlatBucket& bucket = layout_.buckets()[b];
    gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size).add_(reduced_[b]);
    reduced_[b] = torch::Tensor();
  }
}

void ZeroEngine::FinishReduction() {
  if (!reducing_) BeginReduction();
  hooks_armed_ = false;
  LaunchBuckets(true);
  for (int b = 0; b < static_cast<int>(pending_.size()); ++b) {
    if (pending_[b]) FinishBucket(b);
  }
  reducing_ = false;
}

bool ZeroEngine::ReplayFromGraphs(bool on) {
  // (A GPU device means a CUDA build: SelectDevice refuses "cuda" elsewhere.)
  if (!on || stage_ >= 2 || communicator_.world_size() > 1 || !device_.is_cuda()) {
    graphs_.reset();
    return false;
  }
  if (!graphs_) {
    graphs_ = std::make_unique<MicroBatchGraphs>([this](const torch::Tensor& inputs, const torch::Tensor& targets) {
      auto loss = model_->LossSum(inputs, targets);
      loss.backward(backward_scale_);  // hooks disarmed: the step starts the reductions
      return loss.detach();
    });
  }
  return true;
}

double ZeroEngine::MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets, bool last) {
  if (graphs_) return graphs_->Run(inputs, targets).item<double>();
  auto loss = model_->LossSum(inputs, targets);
  if (stage_ == 2 || last) {
    BeginReduction();
    hooks_armed_ = true;
  }
  try {
    loss.backward(backward_scale_);
  } catch (...) {
    // Profiling recovers from out of memory and goes on: the reductions this backward
    // started are abandoned (waited for and freed), so that the next micro-batch
    // launches each once and the communicator counts none of them in flight.
    hooks_armed_ = false;
    for (auto& pending : pending_) pending.reset();
    for (auto& reduced : reduced_) reduced = torch::Tensor();
    reducing_ = false;
    throw;
  }
  hooks_armed_ = false;
  return loss.item<double>();
}

double ZeroEngine::EvalMicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) {
  // Every rank holds the whole parameters between steps (Step all-gathers them at
  // stages 1-2): nothing to communicate.
  if (!inputs.defined()) return 0;
  torch::NoGradGuard no_grad;
  return model_->LossSum(inputs, targets).item<double>();
}

void ZeroEngine::EndRound(bool /*computed*/) {
  if (stage_ != 2) return;
  FinishReduction();  // without compute it starts every bucket, with zeros
  EndLocalPeriod();
}

torch::Tensor ZeroEngine::OwnedGradient(const FlatBucket& bucket) {
  if (stage_ == 2) return gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size);
  return flat_gradients_.narrow(0, bucket.owned_begin, bucket.owned_size);
}

torch::Tensor ZeroEngine::OwnedParameters(const FlatBucket& bucket) {
  return flat_parameters_.narrow(0, bucket.owned_begin, bucket.owned_size);
}

double ZeroEngine::Step(double divisor) {
  torch::NoGradGuard no_grad;
  // Stages 0-1: the buckets the last backward did not start (all of them on a rank with
  // no micro-batch) start now; then every reduction is waited for.
  if (stage_ <= 1) {
    FinishReduction();
    EndLocalPeriod();
  }
  const double norm = ScaleClipAndUpdate(divisor);
  if (stage_ >= 1) {
    for (const FlatBucket& bucket : layout_.buckets()) {
      auto whole = flat_parameters_.narrow(0, bucket.begin, bucket.size);
      communicator_.AllGather(OwnedParameters(bucket).clone(), whole, bucket.slices);
    }
  }
  if (stage_ <= 1) flat_gradients_.zero_();
  if (stage_ == 2) gradient_shard_.zero_();
  if (graphs_) graphs_->EndWarmUp();  // every size of the plan has run eagerly
  return norm;
}

StateDict ZeroEngine::FullState(bool keep) {
  if (Mixed()) return MasterState(keep);
  if (!keep) return {};
  const CountingAllocator::HostMemory host;  // a GPU's copies are in the host's RAM
  return ModelStateDict(*model_);
}

CollectiveParams ZeroEngine::CollectivePlan() const {
  // One collective per bucket: stage 0 all-reduces the gradients, stages 1-2
  // reduce-scatter them (stage 1 once, after the step's last micro-batch; stage 2 every
  // round), and stages 1-2 all-gather the updated parameters after the step.
  const CollectiveUse whole{layout_.total(), static_cast<int>(layout_.buckets().size())};
  CollectiveParams plan;
  if (stage_ == 0) {
    plan.all_reduce_per_step = whole;
  } else {
    (stage_ == 1 ? plan.reduce_scatter_per_step : plan.reduce_scatter_per_round) = whole;
    plan.all_gather_per_step = whole;
  }
  return plan;
}

}  // namespace poplar
