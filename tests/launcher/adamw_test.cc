// The optimizer's pieces that need no process: how a slice splits into decaying and
// non-decaying runs (the fused GPU step makes one kernel launch per kind), and one
// AdamW step against the formula.
#include "launcher/zero/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

namespace poplar {
namespace {

std::vector<std::pair<std::int64_t, std::int64_t>> Pairs(const std::vector<DecayRange>& runs) {
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
  for (const auto& run : runs) pairs.emplace_back(run.begin, run.length);
  return pairs;
}

TEST(SplitByDecay, CoversTheSliceWithTheRunsBetweenTheDecayingOnes) {
  const DecaySplit split = SplitByDecay({{2, 3}, {5, 1}, {9, 4}}, 15);
  EXPECT_EQ(Pairs(split.decay), (std::vector<std::pair<std::int64_t, std::int64_t>>{{2, 3}, {5, 1}, {9, 4}}));
  EXPECT_EQ(Pairs(split.no_decay), (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 2}, {6, 3}, {13, 2}}));
}

TEST(SplitByDecay, AllOrNothing) {
  EXPECT_EQ(Pairs(SplitByDecay({}, 7).no_decay), (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 7}}));
  EXPECT_TRUE(SplitByDecay({}, 7).decay.empty());
  EXPECT_TRUE(SplitByDecay({{0, 7}}, 7).no_decay.empty());
  EXPECT_TRUE(SplitByDecay({}, 0).no_decay.empty());
}

TEST(AdamWStep, FollowsTheFormulaWithDecayOnlyWhereAsked) {
  AdamWOptions options;
  options.lr = 0.1;
  options.weight_decay = 0.5;
  auto parameters = torch::tensor({1.0f, 1.0f});
  const auto gradient = torch::tensor({0.5f, 0.5f});
  auto m = torch::zeros({2});
  auto v = torch::zeros({2});
  AdamWStep(parameters, gradient, m, v, {{0, 1}}, options, 1);
  // Step 1: m = (1-b1) g, v = (1-b2) g^2, so m / (1-b1) / (sqrt(v / (1-b2)) + eps) = 1.
  const double update = options.lr * 0.5 / (0.5 + options.eps);
  EXPECT_NEAR(parameters[0].item<double>(), 1.0 * (1 - 0.1 * 0.5) - update, 1e-6);  // decayed
  EXPECT_NEAR(parameters[1].item<double>(), 1.0 - update, 1e-6);                    // not decayed
  EXPECT_NEAR(m[0].item<double>(), (1 - options.beta1) * 0.5, 1e-7);
  EXPECT_NEAR(v[1].item<double>(), (1 - options.beta2) * 0.25, 1e-7);
}

}  // namespace
}  // namespace poplar
