// Zero3Engine: ZeRO stage 3. Parameters, gradients and Adam state are all partitioned:
// between uses, a rank holds only its slice of each unit's parameters (1/N, or its state
// share: flat_layout.h).
//
// The model runs as a chain of units (decoder.h): Embed, each layer, HeadLoss. Each unit
// is a bucket of the flat layout, except that HeadLoss also needs the embedding's bucket
// when its head is tied to the embedding. Each unit runs inside a custom autograd function that
//   forward:  runs the unit without keeping activations and saves only its input;
//   backward: recomputes the unit with autograd on and back-propagates
// (block-level activation recomputation: one extra forward per unit, less each block's
// last linear map, whose output the backward does not need: LayerRecomputeBackward).
// The head is the exception: its backward follows its forward at once, so its forward keeps its graph
// (the activations recomputing would rebuild at that very moment: no higher peak) and
// its backward uses it. That saves a forward of the vocabulary-wide head per
// micro-batch, one of the step's largest products.
//
// Around the units, one micro-batch is a fixed schedule of visits (forward through units
// 0..U-1, backward through U-1..0) that says, per visit, which buckets to all-gather
// before it and which to reduce-scatter and free after it. A bucket is gathered for
// each run of consecutive visits that need it, so the head's forward and backward share
// one gather; a bucket that several units need (the tied embedding) stays gathered from
// its first use to its last, so its gradient is complete, and reduce-scattered, once.
// Per micro-batch that moves each bucket's parameters at most twice and its gradient
// once (the cost model's 2 all-gathers + 1 reduce-scatter; the embedding once each).
// The next visit's gathers travel while the current visit computes.
//
// A rank with a 0 entry in a round runs the same schedule, with zero gradients, without
// computing. Persistent memory: 16P/N bytes (fp32; 16P times its share when uneven). An evaluation (EvalMicroBatch)
// runs the units forward only, outside that schedule: each unit's buckets gathered before it (the next unit's while it
// computes) and freed after it.
#pragma once

#include <deque>
#include <vector>

#include "launcher/zero/training_engine.h"

namespace poplar {

class Zero3Engine final : public ShardedAdamW {
 public:
  Zero3Engine(Decoder model, Communicator& communicator, const AdamWOptions& options, torch::ScalarType working,
              const std::vector<double>& state_shares = {});

  double MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets, bool last) override;
  void EndRound(bool computed) override;
  double EvalMicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) override;
  double Step(double divisor) override;
  StateDict FullState(bool keep) override;
  CollectiveParams CollectivePlan() const override;

  // For the autograd function: run unit `unit` forward (no graph), and its backward.
  torch::Tensor ForwardUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets);
  torch::Tensor BackwardUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets,
                             const torch::Tensor& output_gradient);

 private:
  torch::Tensor OwnedGradient(const FlatBucket& bucket) override;
  torch::Tensor OwnedParameters(const FlatBucket& bucket) override;

  // One visit of a unit within a micro-batch's schedule.
  struct Visit {
    int unit = 0;
    std::vector<int> gather;   // buckets to all-gather before the visit
    std::vector<int> reduce;   // buckets whose gradients are complete after it
    std::vector<int> release;  // buckets to free after it
  };
  static std::vector<Visit> MicroBatchSchedule(const std::vector<std::vector<int>>& unit_buckets);

  // Buckets, whole, gathered and being gathered.
  struct Gathering {
    std::vector<int> buckets;
    std::vector<torch::Tensor> wholes;
    std::vector<std::unique_ptr<PendingCollective>> work;
  };

  int units() const { return static_cast<int>(schedule_.size() / 2); }  // each is visited twice
  torch::Tensor RunUnit(int unit, const torch::Tensor& input, const torch::Tensor& targets);
  Gathering StartGather(const std::vector<int>& buckets);
  void Install(Gathering& gathering);  // waits, then parameters view the wholes
  // The next visit of the schedule, which must be of `unit`: installs its gathers (waiting
  // for their prefetch, or gathering now) and starts the next visit's that gathers.
  void BeginVisit(int unit);
  // Ends the current visit: reduce-scatters and frees what the schedule says.
  void EndVisit();
  void Release(const std::vector<int>& buckets);          // parameters back to empty tensors
  void ReduceGradients(const std::vector<int>& buckets);  // starts reduce-scatters of their .grad
  // Waits for the oldest reductions and adds them into the shards, until at most
  // `in_flight` remain (0: all).
  void FinishReductions(std::size_t in_flight = 0);
  void AbandonMicroBatch();  // after an error: nothing gathered, pending or half-visited

  Decoder model_;
  std::vector<std::vector<int>> unit_buckets_;  // per unit, the buckets it needs
  torch::Tensor shard_parameters_;              // owned parameters, shard layout (working precision)
  torch::Tensor gradient_shard_;                // owned gradients, shard layout (working precision)

  std::vector<Visit> schedule_;       // one micro-batch
  std::size_t cursor_ = 0;            // the visit under way or next
  std::size_t prefetched_visit_ = 0;  // the visit prefetched_ is for, if any
  Gathering prefetched_;
  struct Reduction {
    int bucket;
    torch::Tensor reduced;
    std::unique_ptr<PendingCollective> work;
  };
  std::deque<Reduction> reductions_;  // started, not yet added into the shards
  // The head's forward, kept for its backward: its input (detached, requiring grad when
  // differentiable) and its output with their graph. Empty between micro-batches.
  torch::Tensor head_input_;
  torch::Tensor head_output_;
};

}  // namespace poplar
