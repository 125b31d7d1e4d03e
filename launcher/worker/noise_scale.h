// The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch
// Training", appendix A.1), from squared gradient norms a step already has: each rank's
// local gradient as its reduction takes it (a small batch: the rank's samples of the
// step at stages 0-1, one round's micro-batch at stages 2-3) and the global gradient
// (the whole batch B, whose norm clipping computes). For the mean gradient over b
// independent samples, E|g_b|^2 = |G|^2 + tr(S)/b, so each pair of a small batch b and
// the whole batch gives unbiased estimates of the true gradient's squared norm |G|^2 and
// of the per-sample covariance's trace tr(S):
//
//   |G|^2 ~ (B |g_B|^2 - b |g_b|^2) / (B - b),   tr(S) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B).
//
// Uneven plans give every rank and round its own b. The pairs are combined over every
// rank as ratios of sums, each estimate's numerator summed over the sum of its
// denominators (B - b and 1/b - 1/B), which stays unbiased (the denominators depend on
// the split alone) and weighs each pair by what it tells: a small batch of nearly the
// whole batch, whose estimates' variance grows as 1/(B - b), counts little. The sums
// travel in the step's loss all-reduce, so every rank gets the same; the step's
// estimates are then smoothed over steps; the noise scale B_simple = tr(S) / |G|^2 is the
// ratio of the smoothed values, the batch size beyond which a larger batch stops paying
// for itself. Torch-free, so that it is tested alone against a closed form.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace poplar {

// The squared norm of the mean gradient over `samples` samples.
struct SmallBatchNorm {
  std::int64_t samples = 0;
  double norm_sq = 0;
};

// Sums over pairs (small batch b, whole batch B) of the two estimates' numerators and
// denominators, and the pairs counted: what the ranks add up.
struct NoiseSums {
  double gradient_sq = 0;         // sum of B |g_B|^2 - b |g_b|^2
  double gradient_sq_weight = 0;  // sum of B - b
  double trace = 0;               // sum of |g_b|^2 - |g_B|^2
  double trace_weight = 0;        // sum of 1/b - 1/B
  double pairs = 0;
};

// This rank's pairs: every small batch of 1 to batch - 1 samples with a finite norm,
// against the whole batch's `batch_norm_sq` (none when that is not finite).
NoiseSums PairEstimates(const std::vector<SmallBatchNorm>& small, std::int64_t batch, double batch_norm_sq);

// The smoothed estimates of a run.
class NoiseScale {
 public:
  // `decay`: of the exponential moving averages, in [0, 1).
  explicit NoiseScale(double decay = 0.95);

  struct Estimate {
    double gradient_sq = 0;  // this step's |G|^2 estimate (over every pair)
    double trace = 0;        // this step's tr(S) estimate
    double noise_scale = 0;  // smoothed tr(S) / smoothed |G|^2, in samples; 0 when not positive
  };
  // Every rank's sums of one step; nullopt when no pair was counted (a rank alone with
  // one micro-batch per step).
  std::optional<Estimate> Add(const NoiseSums& every_rank);

 private:
  double decay_;
  double gradient_sq_ = 0, trace_ = 0;  // the moving averages, bias-corrected by weight_
  double weight_ = 0;
};

}  // namespace poplar
