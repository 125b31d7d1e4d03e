// The GPT the worker trains (docs/worker.md): GPT-2 with nanoGPT's parameter names.
// Pre-LayerNorm blocks with biases, learned positions, causal self-attention, exact (erf)
// GELU, no dropout; the output head is tied to the token embedding (it reuses
// transformer.wte.weight, so the model has one parameter for both; state dicts list it
// under both names).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "planner/formats/model_config.h"

namespace poplar {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  int n_head_;
  torch::Tensor causal_mask_;  // libtorch 1.x: [block, block] bool, true where attention is allowed
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // c_proj(Hidden(x))
  torch::Tensor Hidden(const torch::Tensor& x);   // gelu(c_fc(x)): c_proj's input

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  // ZeRO-3's backward of the block, its forward recomputed from the input x: the same
  // gradients as forward(x) followed by autograd's backward with `output_gradient`, but
  // the forward stops at the input of the block's last linear map (mlp.c_proj), whose
  // output no backward needs: the map's product is never computed, only its gradients
  // (PyTorch's non-reentrant checkpointing stops early the same way). Parameter
  // gradients accumulate into .grad, and x's into x.grad where x requires grad.
  void RecomputeBackward(const torch::Tensor& x, const torch::Tensor& output_gradient);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  // Parameters initialised as nanoGPT does (normal 0.02, residual projections scaled by
  // 1/sqrt(2 n_layer), zero biases), from the current torch random state.
  explicit GptImpl(const ModelConfig& config);

  // Sum (not mean) of the cross-entropy over every token of the micro-batch; idx and
  // targets: [B, T] int64 token ids, T <= block_size.
  torch::Tensor LossSum(const torch::Tensor& idx, const torch::Tensor& targets);

  // The model's units, which LossSum chains and ZeRO-3 runs one at a time:
  // Embed (wte, wpe) -> h[0..n_layer) -> HeadLoss (ln_f, and wte as the tied head).
  torch::Tensor Embed(const torch::Tensor& idx);
  torch::Tensor HeadLoss(const torch::Tensor& x, const torch::Tensor& targets);

  // Unique trainable parameters with their nanoGPT names, in a fixed order.
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() const;

  const ModelConfig& config() const { return config_; }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  ModelConfig config_;
  std::shared_ptr<torch::nn::Module> transformer_;
};
TORCH_MODULE(Gpt);

// The name under which the tied head appears in nanoGPT state dicts.
inline constexpr const char* kTiedHeadName = "lm_head.weight";
inline constexpr const char* kTokenEmbeddingName = "transformer.wte.weight";

}  // namespace poplar
