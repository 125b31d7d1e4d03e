// AdamW on flat fp32 slices, with torch.optim.AdamW's arithmetic (PyTorch 1.13's
// single-tensor path), shared by every ZeRO stage's engine.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace poplar {

struct AdamWOptions {
  double lr = 6e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0: no clipping
};

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
void AdamWStep(torch::Tensor parameters, const torch::Tensor& gradient, torch::Tensor exp_avg,
               torch::Tensor exp_avg_sq, const std::vector<DecayRange>& decay,
               const AdamWOptions& options, std::int64_t step);

// torch.nn.utils.clip_grad_norm_'s factor: min(1, clip / (norm + 1e-6)); 1 when clip <= 0.
double ClipCoefficient(double global_norm, double grad_clip);

}  // namespace poplar
