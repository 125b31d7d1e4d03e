#include "launcher/zero/zero3_engine.h"

#include <cstdint>
#include <map>
#include <numeric>
#include <set>

#include "launcher/device/counting_allocator.h"

namespace poplar {
namespace {

// Units as flat-layout buckets: [Embed's parameters], [layer 0's], ..., [the head's].
std::vector<std::vector<NamedTensor>> UnitBuckets(const Decoder& model) {
  std::vector<std::vector<NamedTensor>> buckets(model->units());
  for (auto& [name, parameter] : model->NamedParameters()) buckets[model->UnitOf(name)].emplace_back(name, parameter);
  return buckets;
}

// A unit of the model as an autograd function (see zero3_engine.h). `anchor` requires
// grad so that the first unit, whose input is token ids, is still part of the graph.
struct UnitFunction : public torch::autograd::Function<UnitFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* context, torch::Tensor input, torch::Tensor targets,
                               torch::Tensor anchor, std::int64_t unit, std::int64_t engine) {
    context->saved_data["unit"] = unit;
    context->saved_data["engine"] = engine;
    context->save_for_backward({input, targets});
    return reinterpret_cast<Zero3Engine*>(engine)->ForwardUnit(static_cast<int>(unit), input, targets);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    const auto saved = context->get_saved_variables();
    auto* engine = reinterpret_cast<Zero3Engine*>(context->saved_data["engine"].toInt());
    const int unit = static_cast<int>(context->saved_data["unit"].toInt());
    return {engine->BackwardUnit(unit, saved[0], saved[1], gradients[0]), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Zero3Engine::Zero3Engine(Decoder model, Communicator& communicator, const AdamWOptions& options,
                         torch::ScalarType working, const std::vector<double>& state_shares)
    : ShardedAdamW(FlatLayout(UnitBuckets(model), LayoutWorldSize(communicator.world_size(), state_shares),
                              communicator.rank(), true, state_shares),
                   communicator, options, model->device(), working, model->tied_head()),
      model_(std::move(model)) {
  // Unit u needs bucket u; a tied head also needs the token embedding.
  for (int unit = 0; unit < model_->units(); ++unit) unit_buckets_.push_back({unit});
  if (model_->tied_head()) unit_buckets_.back().push_back(0);
  schedule_ = MicroBatchSchedule(unit_buckets_);
  torch::NoGradGuard no_grad;
  shard_parameters_ = WorkingZeros(layout_.shard_total());
  gradient_shard_ = WorkingZeros(layout_.shard_total());
  for (const FlatBucket& bucket : layout_.buckets()) {
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      CopyOwned(shard_parameters_, bucket, slot, slot.parameter);
      InitMaster(bucket, slot, slot.parameter);
    }
  }
  AbandonMicroBatch();  // every parameter starts released
}

std::vector<Zero3Engine::Visit> Zero3Engine::MicroBatchSchedule(const std::vector<std::vector<int>>& unit_buckets) {
  const int units = static_cast<int>(unit_buckets.size());
  std::vector<Visit> schedule;
  for (int unit = 0; unit < units; ++unit) schedule.push_back(Visit{unit, {}, {}, {}});
  for (int unit = units - 1; unit >= 0; --unit) schedule.push_back(Visit{unit, {}, {}, {}});
  std::map<int, std::vector<std::size_t>> uses;  // bucket -> the visits that need it, in order
  std::map<int, std::set<int>> users;            // bucket -> the units that need it
  for (std::size_t v = 0; v < schedule.size(); ++v) {
    for (int bucket : unit_buckets[schedule[v].unit]) {
      uses[bucket].push_back(v);
      users[bucket].insert(schedule[v].unit);
    }
  }
  for (const auto& [bucket, visits] : uses) {
    // Gathered for each run of consecutive visits; a shared bucket for one run from its
    // first use to its last, so that its gradient is summed before it is reduced.
    const bool shared = users[bucket].size() > 1;
    std::size_t run_start = visits.front();
    for (std::size_t i = 0; i < visits.size(); ++i) {
      const bool last = i + 1 == visits.size();
      if (!last && (shared || visits[i + 1] == visits[i] + 1)) continue;
      schedule[run_start].gather.push_back(bucket);
      schedule[visits[i]].release.push_back(bucket);
      if (!last) run_start = visits[i + 1];
    }
    schedule[visits.back()].reduce.push_back(bucket);  // a backward visit: gradients complete
  }
  return schedule;
}

Zero3Engine::Gathering Zero3Engine::StartGather(const std::vector<int>& buckets) {
  Gathering gathering;
  gathering.buckets = buckets;
  for (int b : buckets) {
    const FlatBucket& bucket = layout_.buckets()[b];
    gathering.wholes.push_back(WorkingEmpty(bucket.size));
    gathering.work.push_back(communicator_.StartAllGather(
        shard_parameters_.narrow(0, bucket.shard_offset, bucket.owned_size), gathering.wholes.back(), bucket.slices));
  }
  return gathering;
}

void Zero3Engine::Install(Gathering& gathering) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < gathering.buckets.size(); ++i) {
    gathering.work[i]->Wait();
    const FlatBucket& bucket = layout_.buckets()[gathering.buckets[i]];
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      auto parameter = slot.parameter;
      parameter.set_data(gathering.wholes[i].narrow(0, slot.offset - bucket.begin, slot.numel).view(slot.shape));
    }
  }
}

void Zero3Engine::BeginVisit(int unit) {
  const Visit& visit = schedule_[cursor_];
  TORCH_CHECK(visit.unit == unit, "ZeRO-3 units ran out of order: expected unit ", visit.unit, ", got ", unit);
  Gathering current;
  if (!prefetched_.buckets.empty() && prefetched_visit_ == cursor_) {
    current = std::move(prefetched_);
    prefetched_ = Gathering();
  } else {
    current = StartGather(visit.gather);
  }
  // The next gathering visit's parameters travel while this one computes; not across
  // micro-batches, whose parameters may change in between.
  for (std::size_t next = cursor_ + 1; prefetched_.buckets.empty() && next < schedule_.size(); ++next) {
    if (schedule_[next].gather.empty()) continue;
    prefetched_ = StartGather(schedule_[next].gather);
    prefetched_visit_ = next;
  }
  Install(current);
}

void Zero3Engine::EndVisit() {
  const Visit& visit = schedule_[cursor_];
  ReduceGradients(visit.reduce);
  Release(visit.release);
  if (++cursor_ == schedule_.size()) cursor_ = 0;
}

void Zero3Engine::Release(const std::vector<int>& buckets) {
  for (int b : buckets) {
    for (int index : layout_.buckets()[b].slots) {
      auto parameter = layout_.slots()[index].parameter;
      parameter.set_data(WorkingZeros(0));
      parameter.mutable_grad() = torch::Tensor();
    }
  }
}

void Zero3Engine::ReduceGradients(const std::vector<int>& buckets) {
  torch::NoGradGuard no_grad;
  for (int b : buckets) {
    const FlatBucket& bucket = layout_.buckets()[b];
    auto buffer = WorkingZeros(bucket.size);
    for (int index : bucket.slots) {
      const FlatSlot& slot = layout_.slots()[index];
      const auto& gradient = slot.parameter.grad();
      if (gradient.defined()) buffer.narrow(0, slot.offset - bucket.begin, slot.numel).copy_(gradient.view({-1}));
    }
    CountLocalGradient(buffer);
    Reduction reduction{b, WorkingEmpty(bucket.owned_size), nullptr};
    reduction.work = communicator_.StartReduceScatterSum(buffer, reduction.reduced, bucket.slices);
    reductions_.push_back(std::move(reduction));
  }
  // A reduction holds a whole bucket's gradient until it is done: keep only the last
  // few in flight, so that backward's peak memory stays a few units, not the model.
  FinishReductions(static_cast<std::size_t>(kReductionsInFlight));
}

void Zero3Engine::FinishReductions(std::size_t in_flight) {
  while (reductions_.size() > in_flight) {
    Reduction& reduction = reductions_.front();
    reduction.work->Wait();
    const FlatBucket& bucket = layout_.buckets()[reduction.bucket];
    gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size).add_(reduction.reduced);
    reductions_.pop_front();
  }
}

void Zero3Engine::AbandonMicroBatch() {
  head_input_ = head_output_ = torch::Tensor();
  prefetched_ = Gathering();
  reductions_.clear();
  cursor_ = 0;
  std::vector<int> all(layout_.buckets().size());
  std::iota(all.begin(), all.end(), 0);
  Release(all);
}

torch::Tensor Zero3Engine::RunUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets) {
  if (unit == 0) return model_->Embed(input);
  if (unit == units() - 1) return model_->HeadLoss(input, targets);
  return model_->Layer(unit - 1, input);
}

torch::Tensor Zero3Engine::ForwardUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets) {
  BeginVisit(unit);
  torch::Tensor output;
  if (unit == units() - 1) {
    // The head: its backward comes next, with its parameters still gathered (one run of
    // visits); keep the graph for it instead of recomputing.
    torch::AutoGradMode enable(true);
    head_input_ = input.is_floating_point() ? input.detach().requires_grad_(true) : input;
    head_output_ = RunUnit(unit, head_input_, targets);
    output = head_output_.detach();
  } else {
    torch::NoGradGuard no_grad;
    output = RunUnit(unit, input, targets);
  }
  EndVisit();
  return output;
}

torch::Tensor Zero3Engine::BackwardUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets,
                                        const torch::Tensor& output_gradient) {
  BeginVisit(unit);
  torch::Tensor input_gradient;
  {
    torch::AutoGradMode enable(true);
    TORCH_CHECK(!head_output_.defined() || unit == units() - 1, "ZeRO-3: the head's kept graph would serve unit ",
                unit);
    torch::Tensor x = head_input_, output = head_output_;
    head_input_ = head_output_ = torch::Tensor();
    if (output.defined()) {  // the head, its graph kept
      torch::autograd::backward({output}, {output_gradient});
    } else {
      x = input.is_floating_point() ? input.detach().requires_grad_(true) : input;
      if (unit > 0 && unit + 1 < units()) {  // a layer: recomputed up to its last linear map
        model_->LayerRecomputeBackward(unit - 1, x, output_gradient);
      } else {  // the embedding: recomputed whole
        torch::autograd::backward({RunUnit(unit, x, targets)}, {output_gradient});
      }
    }
    if (x.requires_grad()) input_gradient = x.grad();
  }
  EndVisit();
  return input_gradient;
}

double Zero3Engine::MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets, bool /*last*/) {
  const auto engine = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(this));
  try {
    // Autograd functions take defined tensors only: empty placeholders where a unit has
    // no targets.
    auto anchor = torch::zeros({}, torch::TensorOptions().device(device_).requires_grad(true));
    const auto no_targets = torch::empty({0}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    auto x = UnitFunction::apply(inputs, no_targets, anchor, 0, engine);
    for (int unit = 1; unit + 1 < units(); ++unit) {
      x = UnitFunction::apply(x, no_targets, anchor, unit, engine);
    }
    auto loss = UnitFunction::apply(x, targets, anchor, units() - 1, engine);
    loss.backward(backward_scale_);
    return loss.item<double>();
  } catch (...) {
    // Out of memory while profiling is recovered from: start the next micro-batch from a
    // clean state (in training the process ends on any error).
    AbandonMicroBatch();
    throw;
  }
}

double Zero3Engine::EvalMicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) {
  TORCH_CHECK(cursor_ == 0 && reductions_.empty(), "ZeRO-3: an evaluation must come between steps");
  torch::NoGradGuard no_grad;
  const bool computing = inputs.defined();
  torch::Tensor x = inputs;
  Gathering next = StartGather(unit_buckets_[0]);
  try {
    for (int unit = 0; unit < units(); ++unit) {
      Gathering current = std::move(next);
      next = Gathering();
      if (unit + 1 < units()) next = StartGather(unit_buckets_[unit + 1]);  // travels while this unit computes
      Install(current);
      if (computing) x = RunUnit(unit, x, targets);
      Release(current.buckets);
    }
  } catch (...) {
    AbandonMicroBatch();
    throw;
  }
  return computing ? x.item<double>() : 0;
}

void Zero3Engine::EndRound(bool computed) {
  if (!computed) {
    // The collectives a computing rank issues, in the same order, with zero gradients.
    for (const Visit& visit : schedule_) {
      BeginVisit(visit.unit);
      EndVisit();
    }
  }
  FinishReductions();
  EndLocalPeriod();
}

torch::Tensor Zero3Engine::OwnedGradient(const FlatBucket& bucket) {
  return gradient_shard_.narrow(0, bucket.shard_offset, bucket.owned_size);
}

torch::Tensor Zero3Engine::OwnedParameters(const FlatBucket& bucket) {
  return shard_parameters_.narrow(0, bucket.shard_offset, bucket.owned_size);
}

double Zero3Engine::Step(double divisor) {
  const double norm = ScaleClipAndUpdate(divisor);
  gradient_shard_.zero_();
  return norm;
}

StateDict Zero3Engine::FullState(bool keep) {
  if (Mixed()) return MasterState(keep);
  StateDict state;
  for (int b = 0; b < static_cast<int>(layout_.buckets().size()); ++b) {
    Gathering gathering = StartGather({b});  // outside the micro-batch schedule
    Install(gathering);
    for (int index : layout_.buckets()[b].slots) {
      if (!keep) break;
      const FlatSlot& slot = layout_.slots()[index];
      const CountingAllocator::HostMemory host;  // a GPU's copies are in the host's RAM
      state[slot.name] = slot.parameter.detach().cpu().clone();
    }
    Release({b});
  }
  if (keep) AddTiedHead(tied_, state);
  return state;
}

CollectiveParams Zero3Engine::CollectivePlan() const {
  // Per micro-batch (round), the schedule's gathers and reductions, one call per bucket.
  CollectiveParams plan;
  for (const Visit& visit : schedule_) {
    for (int b : visit.gather) {
      plan.all_gather_per_round.params += layout_.buckets()[b].size;
      plan.all_gather_per_round.calls += 1;
    }
    for (int b : visit.reduce) {
      plan.reduce_scatter_per_round.params += layout_.buckets()[b].size;
      plan.reduce_scatter_per_round.calls += 1;
    }
  }
  return plan;
}

}  // namespace poplar
