// The GPT's pieces that training relies on beyond forward: ZeRO-3's recomputing backward.
#include "launcher/model/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/device/counting_allocator.h"

namespace poplar {
namespace {

ModelConfig SmallConfig() {
  return ModelConfig{/*n_layer=*/1, /*n_head=*/2, /*n_embd=*/16, /*vocab_size=*/32, /*block_size=*/8};
}

struct Gradients {
  std::vector<torch::Tensor> parameters;
  torch::Tensor input;
};

// The block's parameter gradients and its input's after one backward, from `start`:
// each parameter's .grad set to it first (undefined: none), so accumulation shows.
template <typename Backward>
Gradients RunBackward(Block& block, const torch::Tensor& x0, const torch::Tensor& start, Backward backward) {
  for (auto& parameter : block->parameters()) {
    parameter.mutable_grad() = start.defined() ? torch::full_like(parameter, 0.5) : torch::Tensor();
  }
  auto x = x0.detach().clone().requires_grad_(true);
  backward(x);
  Gradients result{{}, x.grad().clone()};
  for (const auto& parameter : block->parameters()) result.parameters.push_back(parameter.grad().clone());
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
void CheckAgainstAutograd(const torch::Tensor& earlier, torch::ScalarType dtype = torch::kFloat32) {
  torch::manual_seed(7);
  const ModelConfig config = SmallConfig();
  Block block(config);
  block->to(dtype);  // bf16: as poplar's mixed precision computes, parameters and all
  const auto x = torch::randn({3, config.block_size, config.n_embd}).to(dtype);
  const auto output_gradient = torch::randn({3, config.block_size, config.n_embd}).to(dtype);
  const auto expected = RunBackward(block, x, earlier, [&](const torch::Tensor& input) {
    torch::autograd::backward({block->forward(input)}, {output_gradient});
  });
  const auto actual = RunBackward(
      block, x, earlier, [&](const torch::Tensor& input) { block->RecomputeBackward(input, output_gradient); });
  if (dtype == torch::kBFloat16) {
    ExpectSameGradients(expected, actual, 2e-2, 2e-2);
  } else {
    ExpectSameGradients(expected, actual, 1e-5, 1e-6);
  }
}

TEST(BlockRecomputeBackward, GivesAutogradsGradients) { CheckAgainstAutograd(torch::Tensor()); }

TEST(BlockRecomputeBackward, AccumulatesIntoGradientsAlreadyThere) { CheckAgainstAutograd(torch::ones({})); }

TEST(BlockRecomputeBackward, GivesAutogradsGradientsInBf16) { CheckAgainstAutograd(torch::Tensor(), torch::kBFloat16); }

// The peak bytes (above what was in use before) of `backward` from fresh gradients.
template <typename Backward>
std::int64_t PeakOf(Block& block, const torch::Tensor& x0, Backward backward) {
  std::int64_t peak = 0;
  RunBackward(block, x0, torch::Tensor(), [&](const torch::Tensor& x) {
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
