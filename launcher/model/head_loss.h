// The loss of the GPT's output head, with its gradient computed in the forward.
//
// HeadCrossEntropySum(hidden, weight, targets) is
//     cross_entropy((hidden · weightᵀ).to(fp32), targets, reduction = sum)
// as autograd computes it (the loss in fp32 whatever the compute precision; for an
// incoming gradient of 1, as training's loss.backward() gives, the same gradients, the
// logits' gradient rounded once to their precision), but it moves far fewer bytes and
// holds far less memory. Another incoming gradient g scales the two products' results
// (in bf16 one rounding more than autograd's, which scales before them). Not twice
// differentiable: its backward treats the saved gradient as a constant.
//
// Autograd's version writes the fp32 copy of the logits, their fp32 log-softmax (kept
// for backward), then in backward an fp32 one-hot gradient, the log-softmax's fp32
// gradient and its copy back to the compute precision: [tokens, vocabulary] tensors,
// the largest of a GPT's step. Here the forward works through the logits in chunks of
// rows: each chunk's log-softmax in fp32 gives its loss, and then its gradient,
// softmax - onehot(targets), which is written over the chunk's logits in their own
// precision (the incoming scalar is applied in backward). Backward is then two matrix
// products (and a scalar multiplication of their small results). Between forward and
// backward it holds one [tokens, vocabulary] tensor in the compute precision (the
// logits, now their gradient) instead of autograd's fp32 log-softmax; beyond that, fp32
// only a chunk at a time.
//
// Where no gradient is wanted (no grad mode, or neither hidden nor weight requires it)
// only the loss is computed. Targets are class indices (int64) in [0, vocabulary); the
// chunks are of `chunk_rows` tokens (0: as many as kHeadLossChunkBytes of fp32 allow).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace poplar {

// Bytes of fp32 log-softmax per chunk; a chunk also makes its fp32 copy of the logits.
inline constexpr std::int64_t kHeadLossChunkBytes = std::int64_t{256} << 20;

// hidden: [..., width]; weight: [vocabulary, width], the same dtype; targets: hidden's
// leading shape. Returns a 0-dimensional fp32 tensor.
torch::Tensor HeadCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, std::int64_t chunk_rows = 0);

}  // namespace poplar
