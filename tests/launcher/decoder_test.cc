// The decoders' pieces that training relies on beyond forward: ZeRO-3's recomputing
// backward, for GPT's blocks and Llama's layers; Llama's attention heads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/device/counting_allocator.h"
#include "launcher/model/gpt.h"
#include "launcher/model/llama.h"

namespace poplar {
namespace {

ModelConfig SmallConfig(Architecture arch = Architecture::kGpt) {
  ModelConfig config{arch, /*n_layer=*/1, /*n_head=*/2, /*n_embd=*/16, /*vocab_size=*/32, /*block_size=*/8};
  if (arch == Architecture::kLlama) {
    config.n_head = 4;
    config.n_kv_head = 2;
    config.intermediate_size = 40;
    config.rope_theta = 10000;
    config.norm_eps = 1e-5;
  }
  return config;
}

struct Gradients {
  std::vector<torch::Tensor> parameters;
  torch::Tensor input;
};

// The block's parameter gradients and its input's after one backward, from `start`:
// each parameter's .grad set to it first (undefined: none), so accumulation shows.
template <typename Backward>
Gradients RunBackward(std::vector<torch::Tensor> parameters, const torch::Tensor& x0, const torch::Tensor& start,
                      Backward backward) {
  for (auto& parameter : parameters) {
    parameter.mutable_grad() = start.defined() ? torch::full_like(parameter, 0.5) : torch::Tensor();
  }
  auto x = x0.detach().clone().requires_grad_(true);
  backward(x);
  Gradients result{{}, x.grad().clone()};
  for (const auto& parameter : parameters) result.parameters.push_back(parameter.grad().clone());
  return result;
}

// The parameters of the decoder's first layer (unit 1).
std::vector<torch::Tensor> FirstLayerParameters(const Decoder& model) {
  std::vector<torch::Tensor> result;
  for (const auto& [name, parameter] : model->NamedParameters()) {
    if (model->UnitOf(name) == 1) result.push_back(parameter);
  }
  return result;
}

// Tolerances: fp32 rounding; bf16 keeps 8 bits, and its sums may round in another order.
void ExpectSameGradients(const Gradients& expected, const Gradients& actual, double rtol, double atol) {
  ASSERT_EQ(expected.parameters.size(), actual.parameters.size());
  EXPECT_TRUE(torch::allclose(expected.input, actual.input, rtol, atol)) << "input gradient";
  for (std::size_t i = 0; i < expected.parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(expected.parameters[i], actual.parameters[i], rtol, atol))
        << "parameter " << i << ": max |diff| "
        << (expected.parameters[i] - actual.parameters[i]).abs().max().item<double>();
  }
}

// Runs both backwards from the same state (fresh .grad, or .grad already holding an
// earlier micro-batch's) and compares every gradient.
void CheckAgainstAutograd(const torch::Tensor& earlier, torch::ScalarType dtype = torch::kFloat32,
                          Architecture arch = Architecture::kGpt) {
  torch::manual_seed(7);
  const ModelConfig config = SmallConfig(arch);
  Decoder model = MakeDecoder(config);
  model->to(dtype);  // bf16: as poplar's mixed precision computes, parameters and all
  const auto layer = FirstLayerParameters(model);
  ASSERT_FALSE(layer.empty());
  const auto x = torch::randn({3, config.block_size, config.n_embd}).to(dtype);
  const auto output_gradient = torch::randn({3, config.block_size, config.n_embd}).to(dtype);
  const auto expected = RunBackward(layer, x, earlier, [&](const torch::Tensor& input) {
    torch::autograd::backward({model->Layer(0, input)}, {output_gradient});
  });
  const auto actual = RunBackward(
      layer, x, earlier, [&](const torch::Tensor& input) { model->LayerRecomputeBackward(0, input, output_gradient); });
  if (dtype == torch::kBFloat16) {
    ExpectSameGradients(expected, actual, 2e-2, 2e-2);
  } else {
    ExpectSameGradients(expected, actual, 1e-5, 1e-6);
  }
}

TEST(BlockRecomputeBackward, GivesAutogradsGradients) { CheckAgainstAutograd(torch::Tensor()); }

TEST(BlockRecomputeBackward, AccumulatesIntoGradientsAlreadyThere) { CheckAgainstAutograd(torch::ones({})); }

TEST(BlockRecomputeBackward, GivesAutogradsGradientsInBf16) { CheckAgainstAutograd(torch::Tensor(), torch::kBFloat16); }

TEST(LlamaLayerRecomputeBackward, GivesAutogradsGradients) {
  CheckAgainstAutograd(torch::Tensor(), torch::kFloat32, Architecture::kLlama);
}

TEST(LlamaLayerRecomputeBackward, AccumulatesIntoGradientsAlreadyThere) {
  CheckAgainstAutograd(torch::ones({}), torch::kFloat32, Architecture::kLlama);
}

TEST(LlamaLayerRecomputeBackward, GivesAutogradsGradientsInBf16) {
  CheckAgainstAutograd(torch::Tensor(), torch::kBFloat16, Architecture::kLlama);
}

// Grouped-query attention equals full multi-head attention whose key and value heads
// are the shared ones repeated: head h reads key/value head h / (n_head / n_kv_head).
TEST(LlamaAttention, GroupedHeadsEqualTheirRepeatedFullHeads) {
  torch::manual_seed(3);
  ModelConfig grouped = SmallConfig(Architecture::kLlama);  // 4 heads, 2 key/value heads of 4
  ModelConfig full = grouped;
  full.n_kv_head = grouped.n_head;
  LlamaAttention attention(grouped), reference(full);
  torch::NoGradGuard no_grad;
  reference->q_proj->weight.copy_(attention->q_proj->weight);
  reference->o_proj->weight.copy_(attention->o_proj->weight);
  const int head = grouped.head_size();
  for (int h = 0; h < full.n_head; ++h) {
    const int shared = h / (grouped.n_head / grouped.n_kv_head);
    reference->k_proj->weight.narrow(0, h * head, head).copy_(attention->k_proj->weight.narrow(0, shared * head, head));
    reference->v_proj->weight.narrow(0, h * head, head).copy_(attention->v_proj->weight.narrow(0, shared * head, head));
  }
  const auto x = torch::randn({2, grouped.block_size, grouped.n_embd});
  const auto cos = torch::randn({grouped.block_size, head}), sin = torch::randn({grouped.block_size, head});
  EXPECT_TRUE(torch::allclose(attention->forward(x, cos, sin), reference->forward(x, cos, sin), 1e-5, 1e-6));
}

// The units own every parameter once: the embedding, each layer's, the head's; a tied
// head is the embedding and has no parameter of its own.
TEST(LlamaUnits, EveryParameterBelongsToItsUnit) {
  for (const bool tied : {false, true}) {
    ModelConfig config = SmallConfig(Architecture::kLlama);
    config.n_layer = 2;
    config.tie_embeddings = tied;
    Decoder model = MakeDecoder(config);
    std::vector<int> count(model->units());
    for (const auto& [name, parameter] : model->NamedParameters()) ++count[model->UnitOf(name)];
    EXPECT_EQ(count, (std::vector<int>{1, 9, 9, tied ? 1 : 2})) << "tied " << tied;
    std::int64_t total = 0;
    for (const auto& [name, parameter] : model->NamedParameters()) total += parameter.numel();
    EXPECT_EQ(total, config.ParameterCount()) << "tied " << tied;
    EXPECT_EQ(model->tied_head().has_value(), tied);
  }
}

// The peak bytes (above what was in use before) of `backward` from fresh gradients.
template <typename Backward>
std::int64_t PeakOf(Block& block, const torch::Tensor& x0, Backward backward) {
  std::int64_t peak = 0;
  RunBackward(block->parameters(), x0, torch::Tensor(), [&](const torch::Tensor& x) {
    const std::int64_t before = CountingAllocator::InUse();
    CountingAllocator::ResetPeak();
    backward(x);
    peak = CountingAllocator::Peak() - before;
  });
  return peak;
}

// ZeRO-3's peak memory is a block's recompute: skipping the last product must lower it
// (by that product's output), and holding an activation beyond its use would raise it.
TEST(BlockRecomputeBackward, HoldsLessThanAutogradsBackwardOfTheWholeForward) {
  CountingAllocator::Install();
  torch::manual_seed(7);
  ModelConfig config = SmallConfig();
  config.n_embd = 64;
  config.block_size = 32;
  Block block(config);
  const auto x = torch::randn({8, config.block_size, config.n_embd});
  const auto output_gradient = torch::randn({8, config.block_size, config.n_embd});
  const auto whole = PeakOf(block, x, [&](const torch::Tensor& input) {
    torch::autograd::backward({block->forward(input)}, {output_gradient});
  });
  const auto skipped =
      PeakOf(block, x, [&](const torch::Tensor& input) { block->RecomputeBackward(input, output_gradient); });
  EXPECT_LT(skipped, whole) << "recompute without the last product: " << skipped << " bytes at peak, "
                            << "forward and backward: " << whole;
}

}  // namespace
}  // namespace poplar
