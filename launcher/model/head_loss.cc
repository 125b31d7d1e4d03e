#include "launcher/model/head_loss.h"

#include <algorithm>

namespace poplar {
namespace {

// [..., width] as [tokens, width].
torch::Tensor Rows(const torch::Tensor& hidden) { return hidden.reshape({-1, hidden.size(-1)}); }

// The loss summed over the rows of `logits` ([tokens, vocabulary]) against `targets`
// ([tokens]), in fp32. With `write_gradient`, each row of `logits` is replaced by the
// loss's gradient with respect to it, softmax(row) - onehot(target), computed in fp32
// and rounded once to the logits' dtype.
torch::Tensor LossOverChunks(torch::Tensor& logits, const torch::Tensor& targets, std::int64_t chunk_rows,
                             bool write_gradient) {
  const std::int64_t rows = logits.size(0);
  const std::int64_t step =
      chunk_rows > 0 ? chunk_rows : std::max<std::int64_t>(1, kHeadLossChunkBytes / (logits.size(1) * 4));
  auto loss = torch::zeros({}, logits.options().dtype(torch::kFloat32));
  for (std::int64_t begin = 0; begin < rows; begin += step) {
    const std::int64_t count = std::min(step, rows - begin);
    auto chunk = logits.narrow(0, begin, count);
    const auto chunk_targets = targets.narrow(0, begin, count).unsqueeze(1);
    // fp32 logits are their own fp32 copy: the log-softmax is a new tensor either way.
    const auto log_probabilities = torch::log_softmax(chunk.to(torch::kFloat32), 1);
    const auto picked = log_probabilities.gather(1, chunk_targets);
    loss.sub_(picked.sum());
    if (!write_gradient) continue;
    torch::exp_out(chunk, log_probabilities);  // softmax, computed in fp32, stored in the logits' dtype
    chunk.scatter_(1, chunk_targets, picked.exp().sub_(1).to(chunk.scalar_type()));  // less the one-hot
  }
  return loss;
}

struct HeadCrossEntropy : public torch::autograd::Function<HeadCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets, std::int64_t chunk_rows) {
    auto logits = Rows(hidden).mm(weight.t());
    auto loss = LossOverChunks(logits, targets.reshape({-1}), chunk_rows, /*write_gradient=*/true);
    // weight.detach(): the storage this forward used, even if ZeRO-3 swaps the
    // parameter's data before backward (set_data); in-place updates still show.
    context->save_for_backward({hidden, weight.detach(), logits});  // the logits now hold their gradient
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    const auto saved = context->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& logits_gradient = saved[2];  // for an incoming gradient of 1
    const auto& scale = gradients[0];        // the incoming gradient: a scalar
    torch::Tensor hidden_gradient, weight_gradient;
    if (context->needs_input_grad(0)) hidden_gradient = logits_gradient.mm(weight).mul_(scale).view(hidden.sizes());
    if (context->needs_input_grad(1)) {
      weight_gradient = logits_gradient.t().mm(Rows(hidden)).mul_(scale);
    }
    return {hidden_gradient, weight_gradient, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor HeadCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, std::int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() >= 1 && weight.dim() == 2 && weight.size(1) == hidden.size(-1),
              "HeadCrossEntropySum: hidden ", hidden.sizes(), " and weight ", weight.sizes(), " do not match");
  TORCH_CHECK(targets.numel() * hidden.size(-1) == hidden.numel(), "HeadCrossEntropySum: ", targets.numel(),
              " targets for hidden ", hidden.sizes());
  if (torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad())) {
    return HeadCrossEntropy::apply(hidden, weight, targets, chunk_rows);
  }
  auto logits = Rows(hidden).mm(weight.t());
  return LossOverChunks(logits, targets.reshape({-1}), chunk_rows, /*write_gradient=*/false);
}

}  // namespace poplar
