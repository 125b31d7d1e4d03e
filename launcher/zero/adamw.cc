#include "launcher/zero/adamw.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace poplar {

namespace {

#if TORCH_VERSION_MAJOR >= 2
void FusedAdamWStep(torch::Tensor parameters, const torch::Tensor& gradient, torch::Tensor exp_avg,
                    torch::Tensor exp_avg_sq, const std::vector<DecayRange>& decay, const AdamWOptions& options,
                    std::int64_t step) {
  // The kernel reads the step count from a device scalar per tensor (one serves all).
  const torch::Tensor step_count =
      torch::full({}, static_cast<double>(step), torch::TensorOptions(torch::kFloat32).device(parameters.device()));
  const DecaySplit split = SplitByDecay(decay, parameters.numel());
  for (const auto& [runs, weight_decay] :
       {std::pair{&split.decay, options.weight_decay}, std::pair{&split.no_decay, 0.0}}) {
    if (runs->empty()) continue;
    std::vector<torch::Tensor> p, g, m, v, steps;
    for (const DecayRange& run : *runs) {
      p.push_back(parameters.narrow(0, run.begin, run.length));
      g.push_back(gradient.narrow(0, run.begin, run.length));
      m.push_back(exp_avg.narrow(0, run.begin, run.length));
      v.push_back(exp_avg_sq.narrow(0, run.begin, run.length));
      steps.push_back(step_count);
    }
    at::_fused_adamw_(p, g, m, v, /*max_exp_avg_sqs=*/{}, steps, options.lr, options.beta1, options.beta2, weight_decay,
                      options.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}
#endif

}  // namespace

DecaySplit SplitByDecay(const std::vector<DecayRange>& decay, std::int64_t length) {
  DecaySplit split;
  std::int64_t at = 0;
  for (const DecayRange& run : decay) {
    if (run.length <= 0) continue;
    if (run.begin > at) split.no_decay.push_back({at, run.begin - at});
    split.decay.push_back(run);
    at = run.begin + run.length;
  }
  if (at < length) split.no_decay.push_back({at, length - at});
  return split;
}

void AdamWStep(torch::Tensor parameters, const torch::Tensor& gradient, torch::Tensor exp_avg, torch::Tensor exp_avg_sq,
               const std::vector<DecayRange>& decay, const AdamWOptions& options, std::int64_t step) {
#if TORCH_VERSION_MAJOR >= 2
  if (parameters.is_cuda()) {
    FusedAdamWStep(parameters, gradient, exp_avg, exp_avg_sq, decay, options, step);
    return;
  }
#endif
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
