#include "launcher/model/decoder.h"

#include <torch/version.h>

#include <cmath>
#include <limits>

#include "launcher/model/gpt.h"
#include "launcher/model/llama.h"

namespace poplar {
namespace {

struct SkippedLinear : public torch::autograd::Function<SkippedLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& y,
                               const torch::Tensor& hidden, const torch::Tensor& weight,
                               const c10::optional<torch::Tensor>& bias) {
    context->save_for_backward({hidden, weight});
    context->saved_data["bias"] = bias.has_value();
    return torch::zeros({}, y.options()).expand(y.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients) {
    const auto saved = context->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& output = gradients[0];
    const auto rows = output.reshape({-1, output.size(-1)});
    const torch::Tensor bias = context->saved_data["bias"].toBool() ? rows.sum(0) : torch::Tensor();
    return {output, output.matmul(weight), rows.t().mm(hidden.reshape({-1, hidden.size(-1)})), bias};
  }
};

}  // namespace

torch::Tensor DecoderImpl::LossSum(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto x = Embed(idx);
  for (int layer = 0; layer < config_.n_layer; ++layer) x = Layer(layer, x);
  return HeadLoss(x, targets);
}

std::vector<std::pair<std::string, torch::Tensor>> DecoderImpl::NamedParameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> result;
  for (const auto& item : named_parameters()) result.emplace_back(item.key(), item.value());
  return result;
}

torch::Device DecoderImpl::device() const { return parameters().front().device(); }

Decoder MakeDecoder(const ModelConfig& config) {
  std::shared_ptr<DecoderImpl> model;
  if (config.arch == Architecture::kLlama) {
    model = std::make_shared<LlamaImpl>(config);
  } else {
    model = std::make_shared<GptImpl>(config);
  }
  return Decoder(std::move(model));
}

void AddTiedHead(const std::optional<TiedHead>& tied, std::map<std::string, torch::Tensor>& state) {
  if (tied) state[tied->head] = state.at(tied->embedding);
}

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  const auto time = q.size(-2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  const auto future = torch::ones({time, time}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
#endif
}

torch::Tensor SkippedLinearOutput(const torch::Tensor& y, const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& bias) {
  // An undefined tensor is no variable to autograd: an optional stands for it.
  return SkippedLinear::apply(y, hidden, weight, bias.defined() ? c10::optional<torch::Tensor>(bias) : c10::nullopt);
}

}  // namespace poplar
