#include "launcher/model/gpt.h"

#include <cmath>

#include "launcher/model/head_loss.h"

namespace poplar {
namespace {

// x · Wᵀ + b of a linear layer, as Python's F.linear computes it (at::linear): the bias
// folded into the product (cuBLASLt's bias epilogue on a GPU). torch::nn::Linear's own
// forward (the C++ frontend's F::linear) multiplies inputs of more than two dimensions
// first and adds the bias in a second, broadcasting pass over the output, which costs
// measurable step time on a GPU (docs/benchmarks.md).
torch::Tensor Affine(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

torch::nn::LayerNorm MakeLayerNorm(int n_embd) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd}).eps(1e-5));
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& config) : n_head_(config.n_head) {
  c_attn = register_module("c_attn", torch::nn::Linear(config.n_embd, 3 * config.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(config.n_embd, config.n_embd));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const auto batch = x.size(0), time = x.size(1), channels = x.size(2);
  const auto head_size = channels / n_head_;
  auto qkv = Affine(c_attn, x).split(channels, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({batch, time, n_head_, head_size}).transpose(1, 2); };
  const torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  auto y = CausalAttention(q, k, v).transpose(1, 2).contiguous().view({batch, time, channels});
  return Affine(c_proj, y);
}

MlpImpl::MlpImpl(const ModelConfig& config) {
  c_fc = register_module("c_fc", torch::nn::Linear(config.n_embd, 4 * config.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(4 * config.n_embd, config.n_embd));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return Affine(c_proj, Hidden(x)); }

torch::Tensor MlpImpl::Hidden(const torch::Tensor& x) { return torch::gelu(Affine(c_fc, x)); }

BlockImpl::BlockImpl(const ModelConfig& config) {
  ln_1 = register_module("ln_1", MakeLayerNorm(config.n_embd));
  attn = register_module("attn", CausalSelfAttention(config));
  ln_2 = register_module("ln_2", MakeLayerNorm(config.n_embd));
  mlp = register_module("mlp", Mlp(config));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto y = x + attn(ln_1(x));
  return y + mlp(ln_2(y));
}

void BlockImpl::RecomputeBackward(const torch::Tensor& x, const torch::Tensor& output_gradient) {
  // forward(x) = y + c_proj(hidden), y = x + attn(ln_1(x)): SkippedLinearOutput stands in
  // for it without computing c_proj. Only the graph holds the activations during
  // backward, each freed once used, as in autograd's backward of forward(x).
  torch::Tensor output;
  {
    auto y = x + attn(ln_1(x));
    auto hidden = mlp->Hidden(ln_2(y));
    output = SkippedLinearOutput(y, hidden, mlp->c_proj->weight, mlp->c_proj->bias);
  }
  torch::autograd::backward({output}, {output_gradient});
}

GptImpl::GptImpl(const ModelConfig& config) : DecoderImpl(config) {
  transformer_ = register_module("transformer", std::make_shared<torch::nn::Module>());
  wte = transformer_->register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wpe = transformer_->register_module("wpe", torch::nn::Embedding(config.block_size, config.n_embd));
  h = transformer_->register_module("h", torch::nn::ModuleList());
  for (int i = 0; i < config.n_layer; ++i) h->push_back(Block(config));
  ln_f = transformer_->register_module("ln_f", MakeLayerNorm(config.n_embd));

  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& parameter = item.value();
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = name.find(".ln_") != std::string::npos;
    if (is_norm) continue;  // LayerNorm keeps weight 1, bias 0
    if (is_bias) {
      parameter.zero_();
    } else if (name.find("c_proj.weight") != std::string::npos) {
      parameter.normal_(0.0, residual_std);
    } else {
      parameter.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::Embed(const torch::Tensor& idx) {
  const auto time = idx.size(1);
  TORCH_CHECK(time <= config().block_size, "sequence of ", time, " tokens exceeds block_size ", config().block_size);
  const auto positions = torch::arange(time, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  return wte(idx) + wpe(positions);
}

torch::Tensor GptImpl::HeadLoss(const torch::Tensor& x, const torch::Tensor& targets) {
  // The loss in fp32 whatever the compute precision (head_loss.h).
  return HeadCrossEntropySum(ln_f(x), wte->weight, targets);
}

torch::Tensor GptImpl::Layer(int index, const torch::Tensor& x) { return h[index]->as<Block>()->forward(x); }

void GptImpl::LayerRecomputeBackward(int index, const torch::Tensor& x, const torch::Tensor& output_gradient) {
  h[index]->as<Block>()->RecomputeBackward(x, output_gradient);
}

int GptImpl::UnitOf(const std::string& name) const {
  if (name.rfind("transformer.wte.", 0) == 0 || name.rfind("transformer.wpe.", 0) == 0) return 0;
  if (name.rfind("transformer.h.", 0) == 0) return 1 + std::stoi(name.substr(14, name.find('.', 14) - 14));
  return units() - 1;  // transformer.ln_f.*
}

}  // namespace poplar
