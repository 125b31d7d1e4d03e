// The gradient noise scale (launcher/worker/noise_scale.h): against the closed form on
// synthetic gradients of known mean and covariance, and in training, where every stage
// measures the same from the same split of the batch.
#include "launcher/worker/noise_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "worker_harness.h"

namespace poplar::testing {
namespace {

// One step of synthetic per-sample gradients g = mean + sigma * N(0, 1) per coordinate,
// its batch split into small batches of the sizes `splits`: each small batch's squared
// mean-gradient norm, and the whole batch's.
struct SyntheticStep {
  std::vector<SmallBatchNorm> small;
  double whole_sq = 0;
};
SyntheticStep DrawStep(const std::vector<double>& mean, const std::vector<double>& sigma,
                       const std::vector<int>& splits, std::mt19937_64& random) {
  std::normal_distribution<double> normal(0, 1);
  const std::size_t dims = mean.size();
  std::vector<double> whole(dims, 0);
  SyntheticStep step;
  int batch = 0;
  for (int size : splits) {
    std::vector<double> sum(dims, 0);
    for (int s = 0; s < size; ++s) {
      for (std::size_t j = 0; j < dims; ++j) sum[j] += mean[j] + sigma[j] * normal(random);
    }
    double norm_sq = 0;
    for (std::size_t j = 0; j < dims; ++j) {
      norm_sq += (sum[j] / size) * (sum[j] / size);
      whole[j] += sum[j];
    }
    step.small.push_back({size, norm_sq});
    batch += size;
  }
  for (std::size_t j = 0; j < dims; ++j) step.whole_sq += (whole[j] / batch) * (whole[j] / batch);
  return step;
}

// Per-sample gradients g = G + noise, noise_j ~ N(0, sigma_j^2): |G|^2 and tr(S) =
// sum sigma_j^2 are known. A step's batch of B samples is split into small batches of
// the sizes given (a plan's ranks or rounds); the estimates averaged over many steps
// must be the closed form's.
TEST(NoiseScale, PairEstimatesAreUnbiasedOnSyntheticGradients) {
  constexpr int kDims = 16, kTrials = 4000;
  std::vector<double> mean(kDims), sigma(kDims);
  double true_gradient_sq = 0, true_trace = 0;
  for (int j = 0; j < kDims; ++j) {
    mean[j] = 0.05 * (j % 5 - 2);
    sigma[j] = 0.1 + 0.02 * j;
    true_gradient_sq += mean[j] * mean[j];
    true_trace += sigma[j] * sigma[j];
  }
  const std::vector<int> splits = {3, 5, 8};  // an uneven plan's local batches, B = 16
  const int batch = 16;
  std::mt19937_64 random(42);
  NoiseSums total;
  for (int trial = 0; trial < kTrials; ++trial) {
    const SyntheticStep step = DrawStep(mean, sigma, splits, random);
    const NoiseSums sums = PairEstimates(step.small, batch, step.whole_sq);
    total.gradient_sq += sums.gradient_sq;
    total.gradient_sq_weight += sums.gradient_sq_weight;
    total.trace += sums.trace;
    total.trace_weight += sums.trace_weight;
    total.pairs += sums.pairs;
  }
  EXPECT_EQ(total.pairs, 3.0 * kTrials);
  EXPECT_NEAR(total.gradient_sq / total.gradient_sq_weight, true_gradient_sq, 0.05 * true_gradient_sq);
  EXPECT_NEAR(total.trace / total.trace_weight, true_trace, 0.03 * true_trace);
}

// A split of 13 and 3 of 16 (a fast and a slow rank): the pair of 13, nearly the whole
// batch, divides by 1/13 - 1/16; weighed by that, it no longer swamps the estimate. The
// step's tr(S) estimate varies less than half as much as the plain mean of the two pairs'.
TEST(NoiseScale, APairOfNearlyTheWholeBatchCountsLittle) {
  constexpr int kDims = 8, kTrials = 3000, kBatch = 16;
  const std::vector<int> splits = {13, 3};
  std::mt19937_64 random(7);
  const std::vector<double> mean(kDims, 0.1), sigma(kDims, 0.3);
  std::vector<double> weighted, plain;
  for (int trial = 0; trial < kTrials; ++trial) {
    const SyntheticStep step = DrawStep(mean, sigma, splits, random);
    const NoiseSums sums = PairEstimates(step.small, kBatch, step.whole_sq);
    weighted.push_back(sums.trace / sums.trace_weight);
    double mean_of_pairs = 0;
    for (const SmallBatchNorm& pair : step.small) {
      const NoiseSums one = PairEstimates({pair}, kBatch, step.whole_sq);
      mean_of_pairs += one.trace / one.trace_weight / 2;
    }
    plain.push_back(mean_of_pairs);
  }
  const auto average = [](const std::vector<double>& values) {
    double mean = 0;
    for (double v : values) mean += v / values.size();
    return mean;
  };
  const auto variance = [&](const std::vector<double>& values) {
    const double mean = average(values);
    double square = 0;
    for (double v : values) square += (v - mean) * (v - mean) / values.size();
    return square;
  };
  const double true_trace = kDims * 0.09;
  EXPECT_NEAR(average(weighted), true_trace, 0.05 * true_trace);
  std::cout << "tr(S) estimate variance: weighted " << variance(weighted) << ", plain mean " << variance(plain) << "\n";
  EXPECT_LT(variance(weighted), variance(plain) / 2);
}

TEST(NoiseScale, PairsNeedASmallerBatchAndFiniteNorms) {
  // The whole batch on one rank, an empty round, a non-finite norm: no pair.
  EXPECT_EQ(PairEstimates({{16, 1.0}, {0, 0.0}, {4, NAN}}, 16, 0.5).pairs, 0);
  EXPECT_EQ(PairEstimates({{4, 1.0}}, 16, INFINITY).pairs, 0);
  // One pair, by hand: b = 4, B = 16, |g_b|^2 = 1, |g_B|^2 = 0.5.
  const NoiseSums one = PairEstimates({{4, 1.0}}, 16, 0.5);
  EXPECT_EQ(one.pairs, 1);
  EXPECT_DOUBLE_EQ(one.gradient_sq / one.gradient_sq_weight, (16 * 0.5 - 4 * 1.0) / 12);
  EXPECT_DOUBLE_EQ(one.trace / one.trace_weight, (1.0 - 0.5) / (0.25 - 1.0 / 16));
}

TEST(NoiseScale, SmoothsBothEstimatesAndDividesThem) {
  NoiseScale noise(0.9);
  EXPECT_FALSE(noise.Add({0, 0, 0, 0, 0}));
  // Bias-corrected: the first step's ratio is its own.
  const auto first = noise.Add({2.0, 2.0, 40.0, 2.0, 2});
  ASSERT_TRUE(first);
  EXPECT_DOUBLE_EQ(first->gradient_sq, 1.0);
  EXPECT_DOUBLE_EQ(first->trace, 20.0);
  EXPECT_NEAR(first->noise_scale, 20.0, 1e-12);
  // Then a moving average of each: a step of 1.0 and 10.0 moves the ratio part way.
  const auto second = noise.Add({1.0, 1.0, 10.0, 1.0, 1});
  ASSERT_TRUE(second);
  const double gradient_sq = (0.9 * 0.1 * 1.0 + 0.1 * 1.0) / (0.9 * 0.1 + 0.1);
  const double trace = (0.9 * 0.1 * 20.0 + 0.1 * 10.0) / (0.9 * 0.1 + 0.1);
  EXPECT_NEAR(second->noise_scale, trace / gradient_sq, 1e-12);
  // A noise scale that is not positive says 0.
  NoiseScale negative;
  EXPECT_EQ(negative.Add({1.0, 1.0, -1.0, 1.0, 1})->noise_scale, 0.0);
}

// In training: the same split of the batch (rank 0 five samples, rank 1 three, one round
// each) gives every stage the same estimates, on every rank; several rounds give one too.
TEST(NoiseScale, EveryStageMeasuresTheSameInTraining) {
  ScratchDir scratch("poplar_noise_scale");
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  std::vector<std::vector<nlohmann::json>> by_stage;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string plan = WritePlan(scratch, "plan.json", stage, {{5}, {3}});
    const std::string metrics = "stage" + std::to_string(stage) + "-{rank}.jsonl";
    const JobOutcome job =
        RunJob(scratch, 2, TrainCommand(scratch, plan, 3, {"--metrics", metrics, "--lr", "1e-3", "--timeout", "60"}));
    ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
    std::vector<nlohmann::json> records;
    for (int rank = 0; rank < 2; ++rank) {
      for (const std::string& line :
           ReadLines(scratch.path() + "/stage" + std::to_string(stage) + "-" + std::to_string(rank) + ".jsonl")) {
        records.push_back(nlohmann::json::parse(line));
      }
    }
    ASSERT_EQ(records.size(), 6u);
    by_stage.push_back(records);
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& reference = by_stage[0][i];
    ASSERT_TRUE(reference.contains("noise_scale")) << reference.dump();
    EXPECT_TRUE(std::isfinite(reference["grad_sq_est"].get<double>()));
    EXPECT_GT(reference["grad_var_est"].get<double>(), 0) << reference.dump();
    for (const auto& records : by_stage) {
      for (const auto& record : {records[i], records[i + 3]}) {  // rank 0's and rank 1's step i
        for (const char* key : {"grad_sq_est", "grad_var_est", "noise_scale"}) {
          EXPECT_NEAR(record[key].get<double>(), reference[key].get<double>(),
                      1e-4 * std::abs(reference[key].get<double>()))
              << key << " at stage " << record["stage"] << ", rank " << record["rank"] << ", step " << i + 1;
        }
      }
    }
  }
  // Rounds of their own at stage 2: estimates from each round's micro-batch; off: none.
  const std::string rounds = WritePlan(scratch, "rounds.json", 2, {{2, 3}, {1, 2}});
  const JobOutcome job = RunJob(scratch, 2, TrainCommand(scratch, rounds, 2, {"--metrics", "rounds-{rank}.jsonl"}));
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  EXPECT_TRUE(nlohmann::json::parse(ReadLines(scratch.path() + "/rounds-0.jsonl").back()).contains("noise_scale"));
  const JobOutcome off =
      RunJob(scratch, 2, TrainCommand(scratch, rounds, 2, {"--metrics", "off-{rank}.jsonl", "--noise-scale", "off"}));
  ASSERT_TRUE(off.AllSucceeded()) << off.Describe();
  EXPECT_FALSE(nlohmann::json::parse(ReadLines(scratch.path() + "/off-0.jsonl").back()).contains("noise_scale"));
}

}  // namespace
}  // namespace poplar::testing
