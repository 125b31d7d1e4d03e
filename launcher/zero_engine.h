// ZeroEngine: ZeRO stages 0-2 over flat, bucketed buffers, with AdamW.
//
// Layout. The model's unique parameters are laid end to end in one flat fp32 buffer, in
// model order, cut into buckets of about `bucket_elements` (a bucket never splits a
// parameter); each bucket is padded to a multiple of the world size. The parameters
// become views into the flat buffer, so the model computes on it directly. Rank r *owns*
// the r-th 1/N slice of every bucket (stage 0: every rank owns everything).
//
// Per stage (ZeRO paper; DESIGN.md 5):
//   stage 0: gradients accumulate in a flat buffer; one all-reduce per bucket per step;
//            every rank updates every parameter.
//   stage 1: same gradients; one reduce-scatter per bucket per step leaves each rank the
//            sum of its owned slice; Adam state exists only for the owned slice; the
//            updated slices are all-gathered.
//   stage 2: as stage 1, but gradients are reduce-scattered after every round
//            (FinishRound) into an owned-slice accumulator and the full gradients are
//            freed, so only 1/N of the gradients persists.
// Gradients are sums over samples and ranks; Step() scales them once by 1/token_count,
// clips by the global norm (torch.nn.utils.clip_grad_norm_ semantics, norm over all
// shards) and applies AdamW with torch.optim.AdamW's arithmetic, decaying only
// parameters of two or more dimensions.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/communicator.h"

namespace poplar {

struct AdamWOptions {
  double lr = 6e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0: no clipping
};

// Adam moments of one parameter, full size.
struct AdamMoments {
  torch::Tensor exp_avg;
  torch::Tensor exp_avg_sq;
};

class ZeroEngine {
 public:
  // Takes over `parameters` (unique, named), moving their data into the flat buffer.
  ZeroEngine(std::vector<std::pair<std::string, torch::Tensor>> parameters, int stage,
             Communicator& communicator, AdamWOptions options, std::int64_t bucket_elements);

  // Stage 2: call after every round's backward, and in rounds where this rank computed
  // nothing (it still joins the reduce-scatter). Other stages: does nothing.
  void FinishRound();

  // Ends the step: reduces gradients, scales by 1/token_count, clips, updates, gathers.
  // Collective. Returns the global gradient norm before clipping.
  double Step(double token_count);

  std::int64_t step() const { return step_; }
  double optimizer_seconds() const { return optimizer_seconds_; }

  // Full Adam moments by parameter name, on the CPU (collective at stages 1-2).
  std::map<std::string, AdamMoments> GatherMoments();
  // Restores full moments (for example from a checkpoint written with any plan).
  void LoadMoments(const std::map<std::string, AdamMoments>& moments, std::int64_t step);

 private:
  struct Slot {
    std::string name;
    torch::Tensor parameter;
    std::int64_t offset = 0;  // in the flat buffer
    std::int64_t numel = 0;
    bool decay = false;       // two or more dimensions
  };
  struct Bucket {
    std::int64_t begin = 0;         // in the flat buffer
    std::int64_t size = 0;          // padded to a multiple of the world size
    std::int64_t owned_begin = 0;   // this rank's slice, in the flat buffer
    std::int64_t owned_size = 0;
    std::int64_t shard_offset = 0;  // where the slice sits in shard-layout buffers
    std::vector<int> slots;
  };

  torch::Tensor OwnedGradient(const Bucket& bucket);
  torch::Tensor Zeros(std::int64_t elements) const;  // fp32 on the parameters' device
  void ApplyAdamW(double clip_coefficient);

  int stage_;
  torch::Device device_ = torch::kCPU;
  Communicator& communicator_;
  AdamWOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  torch::Tensor flat_parameters_;  // all parameters
  torch::Tensor flat_gradients_;   // stages 0-1: all gradients (parameters' .grad views)
  torch::Tensor gradient_shard_;   // stage 2: owned gradients, shard layout
  torch::Tensor exp_avg_;          // owned Adam moments, shard layout
  torch::Tensor exp_avg_sq_;
  std::int64_t step_ = 0;
  double optimizer_seconds_ = 0;
};

}  // namespace poplar
