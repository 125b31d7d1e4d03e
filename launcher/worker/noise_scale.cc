#include "launcher/worker/noise_scale.h"

#include <cmath>

namespace poplar {

NoiseSums PairEstimates(const std::vector<SmallBatchNorm>& small, std::int64_t batch, double batch_norm_sq) {
  NoiseSums sums;
  if (!std::isfinite(batch_norm_sq)) return sums;
  const auto whole = static_cast<double>(batch);
  for (const SmallBatchNorm& measured : small) {
    if (measured.samples <= 0 || measured.samples >= batch || !std::isfinite(measured.norm_sq)) continue;
    const auto b = static_cast<double>(measured.samples);
    sums.gradient_sq += whole * batch_norm_sq - b * measured.norm_sq;
    sums.gradient_sq_weight += whole - b;
    sums.trace += measured.norm_sq - batch_norm_sq;
    sums.trace_weight += 1 / b - 1 / whole;
    sums.pairs += 1;
  }
  return sums;
}

NoiseScale::NoiseScale(double decay) : decay_(decay) {}

std::optional<NoiseScale::Estimate> NoiseScale::Add(const NoiseSums& every_rank) {
  if (every_rank.pairs <= 0 || every_rank.gradient_sq_weight <= 0 || every_rank.trace_weight <= 0) {
    return std::nullopt;
  }
  Estimate estimate;
  estimate.gradient_sq = every_rank.gradient_sq / every_rank.gradient_sq_weight;
  estimate.trace = every_rank.trace / every_rank.trace_weight;
  // Moving averages of both, bias-corrected (Adam's way) so that the first steps are not
  // pulled towards 0.
  gradient_sq_ = decay_ * gradient_sq_ + (1 - decay_) * estimate.gradient_sq;
  trace_ = decay_ * trace_ + (1 - decay_) * estimate.trace;
  weight_ = decay_ * weight_ + (1 - decay_);
  const double gradient_sq = gradient_sq_ / weight_, trace = trace_ / weight_;
  estimate.noise_scale = gradient_sq > 0 && trace > 0 ? trace / gradient_sq : 0;
  return estimate;
}

}  // namespace poplar
