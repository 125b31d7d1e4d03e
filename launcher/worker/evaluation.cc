#include "launcher/worker/evaluation.h"

#include <algorithm>

#include "launcher/device/emulated_slowdown.h"
#include "launcher/worker/stopwatch.h"
#include "planner/base/input_error.h"

namespace poplar {

std::optional<Evaluation> LoadEvaluation(const std::string& path, std::int64_t samples_asked, const WorkerPlan& plan,
                                         const ModelConfig& config, int rank) {
  if (path.empty()) return std::nullopt;
  TokenData data(path, config.block_size, config.vocab_size);
  const std::int64_t samples = samples_asked == 0 ? data.samples() : samples_asked;
  if (samples > data.samples()) {
    throw InputError("--eval-samples", "",
                     std::to_string(samples) + " is more than the " + std::to_string(data.samples()) + " samples of " +
                         path + " (block_size " + std::to_string(config.block_size) + ")");
  }
  const EvalShare share = EvalShareOf(plan, rank, samples);
  return Evaluation{std::move(data), samples, share};
}

double Evaluate(TrainingEngine& engine, Communicator& communicator, const Evaluation& evaluation, int block_size,
                const EmulatedSpeed& speed, torch::Device device) {
  double loss_sum = 0;  // every rank's
  std::int64_t first = evaluation.share.first;
  std::int64_t left = evaluation.share.count;
  for (std::int64_t round = 0; round < evaluation.share.rounds; ++round) {
    const int size = static_cast<int>(std::min<std::int64_t>(left, evaluation.share.micro_batch));
    double round_sum = 0;
    if (size == 0) {
      engine.EvalMicroBatch(torch::Tensor(), torch::Tensor());  // joins the others' gathers
    } else {
      auto [inputs, targets] = evaluation.data.Batch(first, size);
      const auto start = Clock::now();
      const EmulatedCompute compute;
      round_sum = engine.EvalMicroBatch(inputs.to(device), targets.to(device));
      compute.Stretch(SecondsSince(start), speed, static_cast<double>(inputs.numel()) / 3);
      first += size;
      left -= size;
    }
    auto total = torch::tensor({round_sum}, torch::kFloat64).to(device);
    communicator.AllReduceSum(total);
    loss_sum += total.cpu().item<double>();
  }
  return loss_sum / (static_cast<double>(evaluation.samples) * block_size);
}

}  // namespace poplar
