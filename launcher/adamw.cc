#include "launcher/adamw.h"

#include <algorithm>
#include <cmath>

namespace poplar {

void AdamWStep(torch::Tensor parameters, const torch::Tensor& gradient, torch::Tensor exp_avg,
               torch::Tensor exp_avg_sq, const std::vector<DecayRange>& decay,
               const AdamWOptions& options, std::int64_t step) {
  const double bias_correction1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
  const double step_size = options.lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  if (options.weight_decay != 0) {
    const double factor = 1.0 - options.lr * options.weight_decay;
    for (const DecayRange& range : decay) parameters.narrow(0, range.begin, range.length).mul_(factor);
  }
  exp_avg.mul_(options.beta1).add_(gradient, 1.0 - options.beta1);
  exp_avg_sq.mul_(options.beta2).addcmul_(gradient, gradient, 1.0 - options.beta2);
  const auto denominator = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(options.eps);
  parameters.addcdiv_(exp_avg, denominator, -step_size);
}

double ClipCoefficient(double global_norm, double grad_clip) {
  if (grad_clip <= 0) return 1.0;
  return std::min(1.0, grad_clip / (global_norm + 1e-6));
}

}  // namespace poplar
