// ZeroEngine: ZeRO stages 0-2 over flat, bucketed buffers (flat_layout.h).
//
// The model's parameters become views into one flat fp32 buffer, so the model computes
// on it directly. Rank r owns its slice of every bucket (its state share; stage 0:
// everything).
//   stage 0: gradients accumulate in a flat buffer (the parameters' .grad are views of
//            it); one all-reduce per bucket per step; every rank updates everything.
//   stage 1: same gradients; one reduce-scatter per bucket per step leaves each rank the
//            sum of its owned slice; Adam state only for that slice; the updated slices
//            are all-gathered.
//   stage 2: as stage 1, but gradients are reduce-scattered every round into an
//            owned-slice accumulator and the full gradients are freed, so only 1/N of
//            them persists.
//
// Overlap: a hook on every parameter's gradient accumulator notes when its gradient is
// complete; as soon as a bucket is complete its collective starts, while backward goes on
// with earlier layers (on the last micro-batch of the step at stages 0-1, every round at
// stage 2). Buckets always start in reverse bucket order, the order backward completes
// them, so every rank issues the same collectives in the same order whatever the timing;
// a rank with no compute in a round starts them all, in that order, with zeros.
//
// CUDA graphs (ReplayFromGraphs): stages 0-1 on one rank replay each micro-batch's
// forward and backward from a graph (micro_batch_graphs.h), hooks disarmed; the step
// starts the (one-rank) reductions.
#pragma once

#include "launcher/zero/micro_batch_graphs.h"
#include "launcher/zero/training_engine.h"

namespace poplar {

class ZeroEngine final : public ShardedAdamW {
 public:
  ZeroEngine(Decoder model, int stage, Communicator& communicator, const AdamWOptions& options,
             std::int64_t bucket_elements, torch::ScalarType working, const std::vector<double>& state_shares = {});

  double MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets, bool last) override;
  void EndRound(bool computed) override;
  double EvalMicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  double Step(double divisor) override;
  StateDict FullState(bool keep) override;
  CollectiveParams CollectivePlan() const override;
  bool ReplayFromGraphs(bool on) override;
  bool Replays(std::int64_t size) const override { return graphs_ && graphs_->Replays(size); }

 private:
  friend struct GradientReadyHook;

  torch::Tensor OwnedGradient(const FlatBucket& bucket) override;
  torch::Tensor OwnedParameters(const FlatBucket& bucket) override;

  void BeginReduction();           // a new round of bucket reductions
  void OnGradientReady(int slot);  // from the hook, during backward
  void LaunchBuckets(bool all);    // start complete (or all) buckets, in order
  void Launch(int bucket);
  void FinishReduction();         // start the rest, wait for all
  void FinishBucket(int bucket);  // wait for its reduction; stage 2: add it to the shard

  Decoder model_;
  int stage_;
  torch::Tensor flat_parameters_;             // all parameters (working precision)
  torch::Tensor flat_gradients_;              // stages 0-1: all gradients (working precision)
  torch::Tensor gradient_shard_;              // stage 2: owned gradients, shard layout
  std::unique_ptr<MicroBatchGraphs> graphs_;  // while micro-batches replay from graphs

  // Bucket reductions in flight.
  std::vector<int> slot_bucket_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive for the hooks
  bool reducing_ = false;                                             // a reduction round has begun
  bool hooks_armed_ = false;                                          // this backward starts buckets as they complete
  std::vector<int> waiting_;  // per bucket: parameters whose gradient is not complete
  int next_launch_ = -1;      // buckets start from the last one down to 0
  std::vector<std::unique_ptr<PendingCollective>> pending_;
  std::vector<torch::Tensor> reduced_;  // stage 2: per bucket, the owned sums
};

}  // namespace poplar
