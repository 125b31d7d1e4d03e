// The held-out evaluation of a training run (--eval-data, --eval-every, --eval-samples):
// the loss of the model on samples it does not train on, after chosen steps, the same
// on every rank. How the samples are shared among the ranks is planner/formats/eval_share.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "launcher/comm/communicator.h"
#include "launcher/device/emulated_slowdown.h"
#include "launcher/worker/token_data.h"
#include "launcher/zero/training_engine.h"
#include "planner/formats/eval_share.h"
#include "planner/formats/model_config.h"
#include "planner/formats/worker_plan.h"

namespace poplar {

// The held-out evaluation of a run with --eval-data: its samples and this rank's share.
struct Evaluation {
  TokenData data;
  std::int64_t samples = 0;  // the first N of data's
  EvalShare share;
};

// --eval-data and --eval-samples, checked against the model's vocabulary and block size
// before the rendezvous; nullopt without --eval-data.
std::optional<Evaluation> LoadEvaluation(const std::string& path, std::int64_t samples_asked, const WorkerPlan& plan,
                                         const ModelConfig& config, int rank);

// The mean loss over every token of the evaluation's samples, the same on every rank
// (all-reduced), with the parameters after the latest step. Collective: every rank runs
// the same number of rounds (EvalShare), each ending in an all-reduce of its losses, so
// that no rank waits longer than a round for the others (one all-reduce at the end
// would bound the whole of a long evaluation by --timeout at stages 0-2, where the
// rounds hold no other collective). An emulated device's forwards take its `speed` as the
// training's do (a forward pass a third of a training token's time at a declared rate),
// so that eval_s is its device's.
double Evaluate(TrainingEngine& engine, Communicator& communicator, const Evaluation& evaluation, int block_size,
                const EmulatedSpeed& speed, torch::Device device);

}  // namespace poplar
