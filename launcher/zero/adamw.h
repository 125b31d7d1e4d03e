// AdamW on flat fp32 slices, with torch.optim.AdamW's arithmetic (PyTorch 1.13's
// single-tensor path), shared by every ZeRO stage's engine.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "planner/formats/adamw_options.h"

namespace poplar {

// A run of elements, relative to the slice, that belongs to a parameter of two or
// more dimensions and so takes weight decay.
struct DecayRange {
  std::int64_t begin = 0;
  std::int64_t length = 0;
};

// One step (number `step`, counting from 1) on `parameters` in place, given the
// gradient (already scaled and clipped) and the moments of the same slice:
//   p *= 1 - lr wd        (decay ranges only)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// On a GPU with libtorch 2 this is libtorch's fused AdamW kernel (torch.optim.AdamW's
// fused=True: the same arithmetic in one pass over the slice, two launches: the
// decaying runs and the others); elsewhere separate tensor operations.
void AdamWStep(torch::Tensor parameters, const torch::Tensor& gradient, torch::Tensor exp_avg, torch::Tensor exp_avg_sq,
               const std::vector<DecayRange>& decay, const AdamWOptions& options, std::int64_t step);

// The runs of a slice of `length` elements by whether they decay: `decay` as given (in
// increasing order, not overlapping) and the runs between and around them.
struct DecaySplit {
  std::vector<DecayRange> decay;
  std::vector<DecayRange> no_decay;
};
DecaySplit SplitByDecay(const std::vector<DecayRange>& decay, std::int64_t length);

// torch.nn.utils.clip_grad_norm_'s factor: min(1, clip / (norm + 1e-6)); 1 when clip <= 0.
double ClipCoefficient(double global_norm, double grad_clip);

}  // namespace poplar
