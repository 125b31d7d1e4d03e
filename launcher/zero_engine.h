// ZeroEngine: ZeRO stages 0-2 over flat, bucketed buffers (flat_layout.h).
//
// The model's parameters become views into one flat fp32 buffer, so the model computes
// on it directly. Rank r owns the r-th 1/N slice of every bucket (stage 0: everything).
//   stage 0: gradients accumulate in a flat buffer (the parameters' .grad are views of
//            it); one all-reduce per bucket per step; every rank updates everything.
//   stage 1: same gradients; one reduce-scatter per bucket per step leaves each rank the
//            sum of its owned slice; Adam state only for that slice; the updated slices
//            are all-gathered.
//   stage 2: as stage 1, but gradients are reduce-scattered at the end of every round
//            into an owned-slice accumulator and the full gradients are freed, so only
//            1/N of them persists.
#pragma once

#include "launcher/training_engine.h"

namespace poplar {

class ZeroEngine final : public ShardedAdamW {
 public:
  ZeroEngine(Gpt model, int stage, Communicator& communicator, const AdamWOptions& options,
             std::int64_t bucket_elements);

  double MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  void EndRound(bool computed) override;
  double Step(double token_count) override;
  StateDict FullState() override { return ModelStateDict(model_); }

 private:
  torch::Tensor OwnedGradient(const FlatBucket& bucket) override;
  torch::Tensor OwnedParameters(const FlatBucket& bucket) override;

  Gpt model_;
  int stage_;
  torch::Tensor flat_parameters_;  // all parameters
  torch::Tensor flat_gradients_;   // stages 0-1: all gradients
  torch::Tensor gradient_shard_;   // stage 2: owned gradients, shard layout
};

}  // namespace poplar
