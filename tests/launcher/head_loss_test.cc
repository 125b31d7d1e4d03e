// The head's loss (launcher/model/head_loss.h): autograd's loss and gradients, whatever the
// chunking, with far less memory at its peak.
#include "launcher/model/head_loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "launcher/device/counting_allocator.h"

namespace poplar {
namespace {

constexpr std::int64_t kBatch = 3, kTime = 8, kWidth = 16, kVocabulary = 40;

struct Result {
  torch::Tensor loss, hidden_gradient, weight_gradient;
};

using Loss = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

// What the head computed before: autograd through fp32 logits and cross_entropy.
torch::Tensor AutogradLoss(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets) {
  const auto logits = torch::nn::functional::linear(hidden, weight).to(torch::kFloat32);
  return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.view({-1}),
                                              torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

Loss Chunked(std::int64_t chunk_rows) {
  return [chunk_rows](const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets) {
    return HeadCrossEntropySum(hidden, weight, targets, chunk_rows);
  };
}

struct Inputs {
  torch::Tensor hidden, weight, targets;
};

Inputs MakeInputs(torch::ScalarType dtype, std::int64_t batch = kBatch, std::int64_t vocabulary = kVocabulary) {
  torch::manual_seed(11);
  // Logits of a few units, so that the softmax is far from uniform.
  return {(torch::randn({batch, kTime, kWidth}) * 2).to(dtype), torch::randn({vocabulary, kWidth}).to(dtype),
          torch::randint(vocabulary, {batch, kTime}, torch::kLong)};
}

Result LossAndGradients(const Loss& loss_of, const Inputs& inputs, double incoming = 1.0) {
  auto hidden = inputs.hidden.clone().requires_grad_(true);
  auto weight = inputs.weight.clone().requires_grad_(true);
  auto loss = loss_of(hidden, weight, inputs.targets);
  torch::autograd::backward({loss}, {torch::full({}, incoming)});
  return {loss.detach(), hidden.grad(), weight.grad()};
}

void ExpectClose(const Result& expected, const Result& actual, double rtol, double atol) {
  EXPECT_EQ(actual.loss.scalar_type(), torch::kFloat32) << "the loss is fp32 whatever the compute precision";
  EXPECT_EQ(actual.hidden_gradient.scalar_type(), expected.hidden_gradient.scalar_type());
  EXPECT_TRUE(torch::allclose(expected.loss, actual.loss, 1e-6, 1e-5))
      << expected.loss.item<double>() << " against " << actual.loss.item<double>();
  EXPECT_TRUE(torch::allclose(expected.hidden_gradient, actual.hidden_gradient, rtol, atol))
      << "hidden: max |diff| " << (expected.hidden_gradient - actual.hidden_gradient).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(expected.weight_gradient, actual.weight_gradient, rtol, atol))
      << "weight: max |diff| " << (expected.weight_gradient - actual.weight_gradient).abs().max().item<double>();
}

TEST(HeadCrossEntropySum, GivesAutogradsLossAndGradientsWhateverTheChunks) {
  const auto inputs = MakeInputs(torch::kFloat32);
  const auto expected = LossAndGradients(AutogradLoss, inputs);
  for (std::int64_t chunk_rows : {0, 1, 5, 24, 100}) {  // 24 rows: one chunk, uneven ones, single rows
    SCOPED_TRACE("chunk_rows " + std::to_string(chunk_rows));
    ExpectClose(expected, LossAndGradients(Chunked(chunk_rows), inputs), 1e-5, 1e-6);
  }
}

TEST(HeadCrossEntropySum, GivesAutogradsLossAndGradientsInBf16) {
  // The loss in fp32 from bf16 logits (exactly as autograd's fp32 copy of them); the
  // logits' gradient computed in fp32 and rounded once to bf16, as autograd's copy back
  // rounds it. The products that follow are bf16 matrix products whose order of
  // accumulation is the CPU kernel's (AVX-512 and AVX2 kernels differ), so the gradients
  // agree within one bf16 rounding of each value (a relative 2^-7), not to the bit.
  const auto inputs = MakeInputs(torch::kBFloat16);
  const auto expected = LossAndGradients(AutogradLoss, inputs);
  const auto actual = LossAndGradients(Chunked(5), inputs);
  ExpectClose(expected, actual, /*rtol=*/1.0 / 128, /*atol=*/1e-6);
  // Another incoming gradient scales after the products: one bf16 rounding more.
  ExpectClose(LossAndGradients(AutogradLoss, inputs, 2.5), LossAndGradients(Chunked(5), inputs, 2.5), 2e-2, 2e-2);
}

TEST(HeadCrossEntropySum, GivesOnlyTheGradientsWanted) {
  const auto inputs = MakeInputs(torch::kFloat32);
  const auto expected = LossAndGradients(AutogradLoss, inputs);
  auto weight = inputs.weight.clone().requires_grad_(true);
  HeadCrossEntropySum(inputs.hidden, weight, inputs.targets, 5).backward();  // hidden needs none
  EXPECT_TRUE(torch::allclose(expected.weight_gradient, weight.grad(), 1e-5, 1e-6));
  auto hidden = inputs.hidden.clone().requires_grad_(true);
  HeadCrossEntropySum(hidden, inputs.weight, inputs.targets, 5).backward();  // weight needs none
  EXPECT_TRUE(torch::allclose(expected.hidden_gradient, hidden.grad(), 1e-5, 1e-6));
}

TEST(HeadCrossEntropySum, ScalesItsGradientsByTheIncomingOne) {
  const auto inputs = MakeInputs(torch::kFloat32);
  // Scaled after the products here, before them in autograd: fp32 rounding either way.
  ExpectClose(LossAndGradients(AutogradLoss, inputs, 2.5), LossAndGradients(Chunked(7), inputs, 2.5), 1e-5, 1e-5);
}

TEST(HeadCrossEntropySum, WithoutGradientsGivesTheLossAlone) {
  const auto inputs = MakeInputs(torch::kFloat32);
  const auto expected = AutogradLoss(inputs.hidden, inputs.weight, inputs.targets);
  torch::Tensor loss;
  {
    torch::NoGradGuard no_grad;
    loss = HeadCrossEntropySum(inputs.hidden.requires_grad_(true), inputs.weight, inputs.targets, 5);
  }
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_TRUE(torch::allclose(expected, loss, 1e-6, 1e-5));
}

TEST(HeadCrossEntropySum, RefusesTargetsThatDoNotMatch) {
  const auto inputs = MakeInputs(torch::kFloat32);
  EXPECT_THROW(HeadCrossEntropySum(inputs.hidden, inputs.weight, inputs.targets.narrow(0, 0, 1)), c10::Error);
  EXPECT_THROW(HeadCrossEntropySum(inputs.hidden, inputs.weight.t(), inputs.targets), c10::Error);
}

// Peak bytes above what was in use before, over forward and backward.
std::int64_t PeakOf(const Loss& loss_of, const Inputs& inputs) {
  auto hidden = inputs.hidden.clone().requires_grad_(true);
  auto weight = inputs.weight.clone().requires_grad_(true);
  const std::int64_t before = CountingAllocator::InUse();
  CountingAllocator::ResetPeak();
  loss_of(hidden, weight, inputs.targets).backward();
  return CountingAllocator::Peak() - before;
}

// Autograd's head holds fp32 [tokens, vocabulary] tensors: the log-softmax from forward
// to backward, and in backward its gradient and the one-hot's besides (12 bytes a logit
// at its peak). In chunks of a quarter of the tokens this one holds the logits in their
// own precision and, besides, at most two fp32 tensors of a chunk (its copy of the
// logits and their log-softmax): 4 bytes a logit in bf16, 5 in fp32 (fp32 logits are
// their own copy).
TEST(HeadCrossEntropySum, HoldsTheLogitsAndTwoFp32ChunksAtMost) {
  CountingAllocator::Install();
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(dtype == torch::kFloat32 ? "fp32" : "bf16");
    constexpr std::int64_t kBatchOf = 16, kVocabularyOf = 4096, kTokens = kBatchOf * kTime;
    const auto inputs = MakeInputs(dtype, kBatchOf, kVocabularyOf);
    const std::int64_t logits_bytes = kTokens * kVocabularyOf * torch::elementSize(dtype);
    const std::int64_t chunk_bytes = (kTokens / 4) * kVocabularyOf * 4;
    const auto autograd = PeakOf(AutogradLoss, inputs);
    const auto chunked = PeakOf(Chunked(kTokens / 4), inputs);
    EXPECT_LE(chunked, logits_bytes + 2 * chunk_bytes + (64 << 10))
        << "chunked: " << chunked << " bytes at peak; logits " << logits_bytes << ", a chunk in fp32 " << chunk_bytes;
    EXPECT_LT(2 * chunked, autograd) << "chunked: " << chunked << " bytes at peak, autograd: " << autograd;
  }
}

}  // namespace
}  // namespace poplar
