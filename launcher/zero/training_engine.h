// TrainingEngine: one rank's ZeRO training of the GPT, whatever the stage. The training
// loop (train.cc) drives it the same way for every stage:
//
//   for each entry b of the rank's plan:  if b > 0: MicroBatch(inputs, targets, last)
//                                         EndRound(b > 0)
//   Step(global token count)
//
// MakeEngine picks the implementation: ZeroEngine (stages 0-2, zero_engine.h) or
// Zero3Engine (stage 3, zero3_engine.h). Every method that communicates is collective:
// all ranks call it in the same order.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/comm/communicator.h"
#include "launcher/model/decoder.h"
#include "launcher/model/state_dict.h"
#include "launcher/zero/adamw.h"
#include "launcher/zero/flat_layout.h"
#include "planner/formats/precision.h"
#include "planner/formats/profile.h"

namespace poplar {

// Adam moments of one parameter, full size.
struct AdamMoments {
  torch::Tensor exp_avg;
  torch::Tensor exp_avg_sq;
};

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  // Forward and backward of one micro-batch (gradients accumulate); returns the loss
  // summed over its tokens. `last` says it is the rank's last micro-batch of the step,
  // so its backward may already start reducing gradients (stages 0-1).
  virtual double MicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets, bool last) = 0;
  // After every plan entry. `computed` is false for a 0 entry (stages 2-3): the rank
  // then joins the round's collectives without computing.
  virtual void EndRound(bool computed) = 0;
  // Reduces gradients, divides them by `divisor` (the global token count, times the
  // backward scale), clips by the global norm, applies AdamW and makes the parameters
  // whole again where the stage needs it. Returns the global gradient norm before
  // clipping. A norm that is not finite (an inf or a nan in some gradient, on some rank)
  // skips the update: parameters, Adam state and its step count stay as they were; every
  // rank computes the same norm (all-reduced, or of identical all-reduced gradients), so
  // every rank skips alike.
  virtual double Step(double divisor) = 0;
  // Multiplies the gradient of every later micro-batch's loss by `scale` (1 unless a loss
  // scaler runs, loss_scaler.h); Step's divisor then includes it. A device tensor that
  // captured CUDA graphs read, so a new scale needs no new capture.
  virtual void SetBackwardScale(double scale) = 0;
  // Forward only, without gradients and changing nothing: the loss summed over the
  // tokens of one micro-batch with the current parameters (a held-out evaluation, between
  // steps). Collective at stage 3, which gathers each unit's parameters: a rank with
  // nothing to evaluate in a round passes undefined tensors, joins the gathers and gets 0.
  virtual double EvalMicroBatch(const torch::Tensor& inputs, const torch::Tensor& targets) = 0;
  // The learning rate the latest Step() updated with (its schedule's, AdamWOptions, at
  // the updates taken: a skipped step does not advance the schedule, as in DeepSpeed).
  virtual double learning_rate() const = 0;
  // Multiplies the schedule's learning rate of every later update (1 until called): an
  // adaptive batch's square-root rule (docs/worker.md, "Adaptive batch").
  virtual void SetLearningRateFactor(double factor) = 0;
  // Updates applied so far (Adam's step count): the steps trained, less those skipped.
  virtual std::int64_t optimizer_steps() const = 0;

  // Full Adam moments by parameter name, on the CPU. Collective at stages 1-3; only a
  // rank that passes `keep` (the one that writes) builds the CPU copies, the others
  // return an empty map, so that checkpoints do not cost every rank a full copy.
  virtual std::map<std::string, AdamMoments> GatherMoments(bool keep) = 0;
  // Restores the full moments of the parameters in `moments` (from a checkpoint written
  // with any plan; any of the parameters: the others keep theirs, so that a resume can
  // hand them over one at a time) and sets the step count.
  virtual void LoadMoments(const std::map<std::string, AdamMoments>& moments, std::int64_t step) = 0;
  // The full model state dict with nanoGPT names, on the CPU (collective at stage 3;
  // empty unless `keep`, as for GatherMoments).
  virtual StateDict FullState(bool keep) = 0;

  // Asks for (on) or stops (off) replaying micro-batches from CUDA graphs
  // (micro_batch_graphs.h); returns whether they now replay. Only stages 0-1 on one rank
  // on a GPU can: their micro-batches launch no collective (with one rank the step
  // starts the reductions, which have nothing to overlap with). Stopping frees the graphs.
  virtual bool ReplayFromGraphs(bool /*on*/) { return false; }
  // Whether micro-batches of `size` samples replay from a graph now (micro_batch_graphs.h:
  // after the first step's warm-up, from the first of the size on, unless its capture
  // failed).
  virtual bool Replays(std::int64_t /*size*/) const { return false; }

  // What this engine hands to its collectives per step and per reduce round, call by call
  // (buckets, and at stage 3 the visits' gathers): what a profile records for the cost
  // model. The scalar all-reduces of the loss and the gradient norm are not here: the
  // cost model adds them (planner/model/cost_model.h: ScalarAllReducesPerStep).
  virtual CollectiveParams CollectivePlan() const = 0;

  // With `on`, the engine keeps the squared norm of this rank's local gradient as each
  // reduction takes it, before any other rank's is added (launcher/worker/noise_scale.h):
  // one pass over the gradient, on the device.
  void CountLocalNorms(bool on) { count_local_norms_ = on; }
  // Those kept since the last call, one per reduction period: at stages 0-1 the step's
  // (every micro-batch of the rank's), at stages 2-3 each round's (its micro-batch; 0 for
  // a round without compute). Scaled as the gradients are (by the backward scale, before
  // Step's divisor). Empty unless CountLocalNorms(true).
  std::vector<double> TakeLocalNorms();
  // The wall time the norms took since the last call: on the CPU their cost; on a GPU,
  // where they run asynchronously, the time to launch them.
  double TakeLocalNormSeconds();

 protected:
  // Adds `gradient`'s squared norm to the current period (when counting).
  void CountLocalGradient(const torch::Tensor& gradient);
  // Ends the current period (when counting).
  void EndLocalPeriod();

 private:
  bool count_local_norms_ = false;
  torch::Tensor period_norm_sq_;             // a device scalar; undefined: 0
  std::vector<torch::Tensor> period_norms_;  // the periods ended
  double norm_seconds_ = 0;
};

// Stages 2-3: a bucket's reduce-scatter holds the bucket's whole gradient until it is
// done, so at most this many are left in flight while backward goes on (the oldest is
// waited for as the next starts): backward's peak then grows with a few buckets, not
// with the model (stage 2 with all of them in flight peaked above stage 1).
inline constexpr int kReductionsInFlight = 3;

// The working precision a worker precision name stands for: fp32, bf16 or fp16.
inline torch::ScalarType WorkingType(const std::string& worker_precision, const std::string& key) {
  if (ParseWorkerPrecision(worker_precision, key) == Precision::kFp32) return torch::kFloat32;
  return worker_precision == "fp16" ? torch::kHalf : torch::kBFloat16;
}

// WorkingType, where `device` computes in it: fp16 on the CPU needs libtorch 2 (1.13 has
// no fp16 matrix product there). Throws InputError naming `key` otherwise.
torch::ScalarType ComputingType(const std::string& worker_precision, torch::Device device, const std::string& key);

// Takes over the model's fp32 parameters (their data moves into the engine's buffers).
// `working` is the precision of computation and communication: kFloat32, or kBFloat16
// for mixed precision (bf16 parameters and gradients, fp32 master weights and Adam state
// in the owned slices: the ZeRO paper's 2 + 2 + 12 bytes per parameter). `state_shares`
// (stages 1-3): every rank's share of the sharded state, flat_layout.h; empty: even; a
// rank alone may be given more than one (LayoutWorldSize: it holds the first).
std::unique_ptr<TrainingEngine> MakeEngine(int stage, Decoder model, Communicator& communicator,
                                           const AdamWOptions& options, std::int64_t bucket_elements,
                                           torch::ScalarType working = torch::kFloat32,
                                           const std::vector<double>& state_shares = {});

// What every stage shares: the flat layout, the owned slices' Adam state (and, in mixed
// precision, their fp32 master weights), and the step that scales, clips and updates
// them.
class ShardedAdamW : public TrainingEngine {
 public:
  std::map<std::string, AdamMoments> GatherMoments(bool keep) override;
  void LoadMoments(const std::map<std::string, AdamMoments>& moments, std::int64_t step) override;
  double learning_rate() const override { return learning_rate_; }
  void SetLearningRateFactor(double factor) override { learning_rate_factor_ = factor; }
  std::int64_t optimizer_steps() const override { return step_; }
  void SetBackwardScale(double scale) override { backward_scale_.fill_(scale); }

 protected:
  // `tied`: the model's tied head, which full state dicts list under both names.
  ShardedAdamW(FlatLayout layout, Communicator& communicator, const AdamWOptions& options, torch::Device device,
               torch::ScalarType working, std::optional<TiedHead> tied);

  // The bucket's owned gradient (summed over ranks, before scaling) and parameters, in
  // the working precision.
  virtual torch::Tensor OwnedGradient(const FlatBucket& bucket) = 0;
  virtual torch::Tensor OwnedParameters(const FlatBucket& bucket) = 0;
  // Copies this rank's part of `values` (slot's full tensor) into `target`, which is in
  // shard layout (exp_avg, master weights, ZeRO-3's parameter shard, ...).
  void CopyOwned(torch::Tensor target, const FlatBucket& bucket, const FlatSlot& slot,
                 const torch::Tensor& values) const;
  // Mixed precision: fills the master weights from the fp32 parameters; call once per
  // slot at construction, before the parameters are converted.
  void InitMaster(const FlatBucket& bucket, const FlatSlot& slot, const torch::Tensor& values);
  // Mixed precision: the full fp32 parameters by name (collective when partitioned).
  StateDict MasterState(bool keep);
  // Scale by 1/divisor, global norm (all-reduced when sharded), clip, AdamW; nothing
  // after the norm when it is not finite.
  double ScaleClipAndUpdate(double divisor);
  torch::Tensor Zeros(std::int64_t elements) const;         // fp32 on the engine's device
  torch::Tensor WorkingZeros(std::int64_t elements) const;  // working precision
  // Uninitialised, for the outputs of collectives (which write every element).
  torch::Tensor WorkingEmpty(std::int64_t elements) const;
  bool Mixed() const { return working_ != torch::kFloat32; }
  // Whether ranks own different slices (stages 1-3 on 2+ ranks).
  bool Partitioned() const { return layout_.partitioned(); }

  FlatLayout layout_;
  Communicator& communicator_;
  AdamWOptions options_;
  torch::Device device_;
  torch::ScalarType working_;
  std::optional<TiedHead> tied_;
  torch::Tensor backward_scale_;  // 0-dimensional fp32 on the device: each loss's incoming gradient

 private:
  torch::Tensor master_;   // mixed precision: fp32 owned parameters, shard layout
  torch::Tensor exp_avg_;  // shard layout
  torch::Tensor exp_avg_sq_;
  std::int64_t step_ = 0;
  double learning_rate_ = 0;  // of the latest update
  double learning_rate_factor_ = 1;
};

}  // namespace poplar
