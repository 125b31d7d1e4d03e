// The decoder-only language model the worker trains, whatever its architecture: the
// interface that the engines, profiling, evaluation and checkpoints use, so that one
// engine serves every model. gpt.h and llama.h implement it; MakeDecoder builds the one
// a configuration names.
//
// A decoder is a chain of units: Embed (unit 0), the layers (units 1..n_layer), and
// HeadLoss (unit n_layer + 1): the final norm, the output head and the loss. LossSum
// chains them; ZeRO-3 runs them one at a time, each with the parameters UnitOf assigns
// it (and the head also with the embedding when the two are tied).
#pragma once

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/formats/model_config.h"

namespace poplar {

// A head that reuses the token embedding: one parameter under two names. Models hold it
// once; state dicts list it under both names, as PyTorch's state_dict() does.
struct TiedHead {
  std::string head;       // "lm_head.weight"
  std::string embedding;  // the embedding's name: the parameter
};

class DecoderImpl : public torch::nn::Module {
 public:
  // [B, T] int64 token ids, T <= block_size -> [B, T, n_embd] activations.
  virtual torch::Tensor Embed(const torch::Tensor& idx) = 0;
  // Layer `index` (0-based) forward.
  virtual torch::Tensor Layer(int index, const torch::Tensor& x) = 0;
  // The layer's backward, its forward recomputed from its input x: the same gradients as
  // Layer(index, x) followed by autograd's backward with `output_gradient`, without the
  // product of the layer's last linear map, whose output no backward needs (the map's
  // gradients come from SkippedLinearOutput). Parameter gradients accumulate into
  // .grad, and x's into x.grad where x requires grad.
  virtual void LayerRecomputeBackward(int index, const torch::Tensor& x, const torch::Tensor& output_gradient) = 0;
  // Sum (not mean) of the cross-entropy over every token, in fp32 whatever the compute
  // precision (head_loss.h); targets: [B, T] int64.
  virtual torch::Tensor HeadLoss(const torch::Tensor& x, const torch::Tensor& targets) = 0;
  // The unit that owns the parameter named `name` (one of NamedParameters()).
  virtual int UnitOf(const std::string& name) const = 0;
  virtual std::optional<TiedHead> tied_head() const = 0;

  // HeadLoss(layers(Embed(idx))).
  torch::Tensor LossSum(const torch::Tensor& idx, const torch::Tensor& targets);
  // Unique trainable parameters with their checkpoint names, in a fixed order.
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() const;
  // The parameters' device.
  torch::Device device() const;
  int units() const { return config_.n_layer + 2; }
  const ModelConfig& config() const { return config_; }

 protected:
  explicit DecoderImpl(ModelConfig config) : config_(std::move(config)) {}

 private:
  ModelConfig config_;
};
TORCH_MODULE(Decoder);

// The model the configuration names, its parameters initialised from the current torch
// random state as its architecture's reference does (gpt.h, llama.h).
Decoder MakeDecoder(const ModelConfig& config);

// Adds a tied head's second name (if any) to a state dict of unique parameters.
void AddTiedHead(const std::optional<TiedHead>& tied, std::map<std::string, torch::Tensor>& state);

// Causal scaled dot-product attention of q [B, H, T, D] over k, v [B, H, T, D]: softmax
// of q·kᵀ/sqrt(D) masked to the past, times v. PyTorch 2's fused kernel (flash or
// memory-efficient on a GPU: no [T, T] scores in memory); on PyTorch 1 the same
// function written out.
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// y + hidden · Wᵀ (+ b) of a layer's last linear map, in a graph that never reads it,
// only back-propagates through it: forward returns zeros of y's shape (a broadcast
// scalar: no memory, no matrix product); backward gives the true gradients: the
// output's to y, and the map's to hidden, W and b (b may be undefined: a map without
// bias). Autograd accumulates them and frees hidden once used.
torch::Tensor SkippedLinearOutput(const torch::Tensor& y, const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& bias);

}  // namespace poplar
