#include "launcher/model/llama.h"

#include "launcher/model/head_loss.h"

namespace poplar {
namespace {

torch::nn::Linear Matrix(int in, int out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); }

// [..., d] -> [-x[d/2:], x[:d/2]]: HF's rotate_half.
torch::Tensor RotateHalf(const torch::Tensor& x) {
  const auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + RotateHalf(x) * sin;
}

}  // namespace

RmsNormImpl::RmsNormImpl(int width, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({width}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  const auto wide = x.to(torch::kFloat32);
  const auto normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const ModelConfig& config)
    : n_head_(config.n_head), n_kv_head_(config.n_kv_head), head_size_(config.head_size()) {
  const int kv_width = config.n_kv_head * config.head_size();
  q_proj = register_module("q_proj", Matrix(config.n_embd, config.n_embd));
  k_proj = register_module("k_proj", Matrix(config.n_embd, kv_width));
  v_proj = register_module("v_proj", Matrix(config.n_embd, kv_width));
  o_proj = register_module("o_proj", Matrix(config.n_embd, config.n_embd));
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto batch = x.size(0), time = x.size(1);
  const auto heads = [&](const torch::Tensor& t, int count) {
    return t.view({batch, time, count, head_size_}).transpose(1, 2);
  };
  const auto q = Rotate(heads(at::linear(x, q_proj->weight), n_head_), cos, sin);
  auto k = Rotate(heads(at::linear(x, k_proj->weight), n_kv_head_), cos, sin);
  auto v = heads(at::linear(x, v_proj->weight), n_kv_head_);
  if (n_kv_head_ != n_head_) {  // HF's repeat_kv: each key/value head serves n_head / n_kv_head query heads
    const auto repeat = [&](const torch::Tensor& t) {
      return t.unsqueeze(2)
          .expand({batch, n_kv_head_, n_head_ / n_kv_head_, time, head_size_})
          .reshape({batch, n_head_, time, head_size_});
    };
    k = repeat(k);
    v = repeat(v);
  }
  const auto y = CausalAttention(q, k, v).transpose(1, 2).contiguous().view({batch, time, n_head_ * head_size_});
  return at::linear(y, o_proj->weight);
}

LlamaMlpImpl::LlamaMlpImpl(const ModelConfig& config) {
  gate_proj = register_module("gate_proj", Matrix(config.n_embd, config.intermediate_size));
  up_proj = register_module("up_proj", Matrix(config.n_embd, config.intermediate_size));
  down_proj = register_module("down_proj", Matrix(config.intermediate_size, config.n_embd));
}

torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& x) { return at::linear(Hidden(x), down_proj->weight); }

torch::Tensor LlamaMlpImpl::Hidden(const torch::Tensor& x) {
  return torch::silu(at::linear(x, gate_proj->weight)) * at::linear(x, up_proj->weight);
}

LlamaLayerImpl::LlamaLayerImpl(const ModelConfig& config) {
  self_attn = register_module("self_attn", LlamaAttention(config));
  mlp = register_module("mlp", LlamaMlp(config));
  input_layernorm = register_module("input_layernorm", RmsNorm(config.n_embd, config.norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RmsNorm(config.n_embd, config.norm_eps));
}

torch::Tensor LlamaLayerImpl::AttentionResidual(const torch::Tensor& x, const torch::Tensor& cos,
                                                const torch::Tensor& sin) {
  return x + self_attn->forward(input_layernorm(x), cos, sin);
}

torch::Tensor LlamaLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto y = AttentionResidual(x, cos, sin);
  return y + mlp(post_attention_layernorm(y));
}

void LlamaLayerImpl::RecomputeBackward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                       const torch::Tensor& output_gradient) {
  torch::Tensor output;
  {
    const auto y = AttentionResidual(x, cos, sin);
    output = SkippedLinearOutput(y, mlp->Hidden(post_attention_layernorm(y)), mlp->down_proj->weight, {});
  }
  torch::autograd::backward({output}, {output_gradient});
}

LlamaImpl::LlamaImpl(const ModelConfig& config) : DecoderImpl(config) {
  model_ = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens = model_->register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.n_embd));
  layers = model_->register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < config.n_layer; ++i) layers->push_back(LlamaLayer(config));
  norm = model_->register_module("norm", RmsNorm(config.n_embd, config.norm_eps));
  if (!config.tie_embeddings) lm_head = register_module("lm_head", Matrix(config.n_embd, config.vocab_size));

  // HF's rotary embedding: inv_freq = 1 / theta^(2i/d) in fp32, angles position * inv_freq.
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  const auto inv_freq =
      1.0 / torch::pow(config.rope_theta, torch::arange(0, config.head_size(), 2, options) / config.head_size());
  const auto angles = torch::outer(torch::arange(config.block_size, options), inv_freq);
  const auto both = torch::cat({angles, angles}, -1);
  // Buffers, not parameters: they move with the model and stay out of state dicts.
  cos_ = register_buffer("rope_cos", both.cos());
  sin_ = register_buffer("rope_sin", both.sin());

  torch::NoGradGuard no_grad;
  for (auto& parameter : parameters()) {
    if (parameter.dim() >= 2) parameter.normal_(0.0, 0.02);
  }
}

std::pair<torch::Tensor, torch::Tensor> LlamaImpl::Rotary(const torch::Tensor& x) const {
  const auto time = x.size(1);
  return {cos_.narrow(0, 0, time).to(x.scalar_type()), sin_.narrow(0, 0, time).to(x.scalar_type())};
}

torch::Tensor LlamaImpl::Embed(const torch::Tensor& idx) {
  TORCH_CHECK(idx.size(1) <= config().block_size, "sequence of ", idx.size(1), " tokens exceeds block_size ",
              config().block_size);
  return embed_tokens(idx);
}

torch::Tensor LlamaImpl::Layer(int index, const torch::Tensor& x) {
  const auto [cos, sin] = Rotary(x);
  return layers[index]->as<LlamaLayer>()->forward(x, cos, sin);
}

void LlamaImpl::LayerRecomputeBackward(int index, const torch::Tensor& x, const torch::Tensor& output_gradient) {
  const auto [cos, sin] = Rotary(x);
  layers[index]->as<LlamaLayer>()->RecomputeBackward(x, cos, sin, output_gradient);
}

torch::Tensor LlamaImpl::HeadLoss(const torch::Tensor& x, const torch::Tensor& targets) {
  return HeadCrossEntropySum(norm(x), lm_head ? lm_head->weight : embed_tokens->weight, targets);
}

int LlamaImpl::UnitOf(const std::string& name) const {
  if (name.rfind("model.embed_tokens.", 0) == 0) return 0;
  if (name.rfind("model.layers.", 0) == 0) return 1 + std::stoi(name.substr(13, name.find('.', 13) - 13));
  return units() - 1;  // model.norm.*, lm_head.*
}

std::optional<TiedHead> LlamaImpl::tied_head() const {
  if (!config().tie_embeddings) return std::nullopt;
  return TiedHead{"lm_head.weight", "model.embed_tokens.weight"};
}

}  // namespace poplar
