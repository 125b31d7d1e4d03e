// Zero3Engine: ZeRO stage 3. Parameters, gradients and Adam state are all partitioned:
// between uses, a rank holds only its 1/N slice of each unit's parameters.
//
// The model runs as a chain of units (gpt.h): Embed, each block, HeadLoss. Each unit is
// a bucket of the flat layout, except that HeadLoss also needs the embedding's bucket
// (its head is tied to wte). Each unit runs inside a custom autograd function that
//   forward:  all-gathers the unit's parameters, runs it without keeping activations,
//             frees the parameters, and saves only its input;
//   backward: all-gathers again, recomputes the unit with autograd on, back-propagates,
//             reduce-scatters the parameter gradients into the owned gradient shards,
//             and frees the parameters and full gradients
// (block-level activation recomputation: one extra forward per unit). A rank with a 0
// entry in a round issues the same all-gathers and reduce-scatters, with zero
// gradients, without computing. Persistent memory: 16P/N bytes (fp32).
#pragma once

#include <deque>
#include <vector>

#include "launcher/training_engine.h"

namespace poplar {

class Zero3Engine final : public ShardedAdamW {
 public:
  Zero3Engine(Gpt model, Communicator& communicator, const AdamWOptions& options,
              torch::ScalarType working);

  double MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets, bool last) override;
  void EndRound(bool computed) override;
  double Step(double token_count) override;
  StateDict FullState(bool keep) override;

  // For the autograd function: run unit `unit` forward (no graph), and its backward.
  torch::Tensor ForwardUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets);
  torch::Tensor BackwardUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets,
                             const torch::Tensor& output_gradient);

 private:
  torch::Tensor OwnedGradient(const FlatBucket& bucket) override;
  torch::Tensor OwnedParameters(const FlatBucket& bucket) override;

  // The unit's buckets, whole, gathered and being gathered.
  struct Gathering {
    std::vector<torch::Tensor> wholes;
    std::vector<std::unique_ptr<PendingCollective>> work;
  };

  torch::Tensor RunUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets);
  Gathering StartGather(int unit);
  void Install(int unit, Gathering& gathering);  // waits, then parameters view the wholes
  // The next gather of the micro-batch's fixed order: waits for its prefetch (or gathers
  // now) and starts the following one.
  void Gather(int unit);
  void Release(int unit);          // parameters back to empty tensors
  void ReduceGradients(int unit);  // starts reduce-scatters into the shards; frees .grad
  // Waits for the oldest reductions and adds them into the shards, until at most
  // `in_flight` remain (0: all).
  void FinishReductions(std::size_t in_flight = 0);

  Gpt model_;
  int units_;                                 // n_layer + 2
  std::vector<std::vector<int>> unit_buckets_;  // unit -> buckets it needs, in order
  torch::Tensor shard_parameters_;  // owned parameters, shard layout (working precision)
  torch::Tensor gradient_shard_;    // owned gradients, shard layout (working precision)

  std::vector<int> gather_order_;   // one micro-batch: 0..U-1, U-1..0
  std::size_t cursor_ = 0;          // next position in gather_order_
  Gathering prefetched_;            // for gather_order_[cursor_], if started
  struct Reduction {
    int bucket;
    torch::Tensor reduced;
    std::unique_ptr<PendingCollective> work;
  };
  std::deque<Reduction> reductions_;  // started, not yet added into the shards
};

}  // namespace poplar
