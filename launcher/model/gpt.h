// The GPT decoder (docs/worker.md): GPT-2 with nanoGPT's parameter names. Pre-LayerNorm
// blocks with biases, learned positions, causal self-attention, exact (erf) GELU, no
// dropout; the output head is tied to the token embedding (it reuses
// transformer.wte.weight, so the model has one parameter for both; state dicts list it
// under both names).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "launcher/model/decoder.h"

namespace poplar {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  int n_head_;
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

  // DecoderImpl::LayerRecomputeBackward for this block: the forward stops at the input
  // of its last linear map, mlp.c_proj (PyTorch's non-reentrant checkpointing stops
  // early the same way).
  void RecomputeBackward(const torch::Tensor& x, const torch::Tensor& output_gradient);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public DecoderImpl {
 public:
  // Parameters initialised as nanoGPT does (normal 0.02, residual projections scaled by
  // 1/sqrt(2 n_layer), zero biases), from the current torch random state.
  explicit GptImpl(const ModelConfig& config);

  torch::Tensor Embed(const torch::Tensor& idx) override;  // wte(idx) + wpe(positions)
  torch::Tensor Layer(int index, const torch::Tensor& x) override;
  void LayerRecomputeBackward(int index, const torch::Tensor& x, const torch::Tensor& output_gradient) override;
  torch::Tensor HeadLoss(const torch::Tensor& x, const torch::Tensor& targets) override;  // ln_f, wte as the head
  int UnitOf(const std::string& name) const override;
  std::optional<TiedHead> tied_head() const override { return TiedHead{"lm_head.weight", "transformer.wte.weight"}; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  std::shared_ptr<torch::nn::Module> transformer_;
};

}  // namespace poplar
