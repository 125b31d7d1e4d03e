// The Llama decoder (docs/worker.md): Hugging Face's LlamaForCausalLM, its parameter
// names and semantics, so that checkpoints move between poplar and `transformers` with
// no renaming. No biases; RMSNorm in fp32 (x * rsqrt(mean(x^2) + eps), then times its
// weight); rotary position embeddings with HF's rotate-half convention and
// inv_freq = 1 / theta^(2i/d); causal attention with grouped-query heads (head h reads
// key/value head h / (n_head / n_kv_head)); SwiGLU MLP down(silu(gate(x)) * up(x)); a
// final RMSNorm and lm_head, which is the token embedding when tie_embeddings.
#pragma once

#include <torch/torch.h>

#include <string>

#include "launcher/model/decoder.h"

namespace poplar {

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int width, double eps);
  // weight * (x32 * rsqrt(mean(x32^2) + eps)).to(x's dtype), x32 = x in fp32.
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const ModelConfig& config);
  // cos, sin: [T, head_size] rotary tables in x's dtype.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int n_head_, n_kv_head_, head_size_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // down_proj(Hidden(x))
  torch::Tensor Hidden(const torch::Tensor& x);   // silu(gate_proj(x)) * up_proj(x): down_proj's input

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMlp);

class LlamaLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaLayerImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  // DecoderImpl::LayerRecomputeBackward for this layer: the forward stops at the input of
  // mlp.down_proj.
  void RecomputeBackward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         const torch::Tensor& output_gradient);

  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  // x + self_attn(input_layernorm(x)): the input of the MLP's residual.
  torch::Tensor AttentionResidual(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
};
TORCH_MODULE(LlamaLayer);

class LlamaImpl : public DecoderImpl {
 public:
  // Parameters initialised as Hugging Face's LlamaPreTrainedModel does (normal 0.02 for
  // every matrix and the embedding, norm weights 1), from the current torch random state.
  explicit LlamaImpl(const ModelConfig& config);

  torch::Tensor Embed(const torch::Tensor& idx) override;  // embed_tokens(idx)
  torch::Tensor Layer(int index, const torch::Tensor& x) override;
  void LayerRecomputeBackward(int index, const torch::Tensor& x, const torch::Tensor& output_gradient) override;
  torch::Tensor HeadLoss(const torch::Tensor& x, const torch::Tensor& targets) override;  // norm, lm_head
  int UnitOf(const std::string& name) const override;
  std::optional<TiedHead> tied_head() const override;

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied to embed_tokens

 private:
  // The rotary tables for x's length, in x's dtype: HF's cos and sin of
  // position * inv_freq, the frequencies repeated for both halves of a head.
  std::pair<torch::Tensor, torch::Tensor> Rotary(const torch::Tensor& x) const;

  std::shared_ptr<torch::nn::Module> model_;
  torch::Tensor cos_, sin_;  // fp32 buffers [block_size, head_size]
};

}  // namespace poplar
