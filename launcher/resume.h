// Resuming a training run from a checkpoint (--resume): the newest any rank holds, sent
// to every rank over the collectives (docs/worker.md, "Checkpoints").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "launcher/communicator.h"
#include "launcher/gpt.h"
#include "launcher/training_engine.h"
#include "planner/checkpoint_line.h"
#include "planner/model_config.h"
#include "planner/training_recipe.h"

namespace poplar {

// What a resumed rank starts from besides the model's parameters.
struct Resumed {
  std::int64_t step = 0;
  std::map<std::string, AdamMoments> moments;  // on the rank's device
  CheckpointLine line;  // of the run that wrote the checkpoint
};

// Resuming needs the checkpoint on one rank only, whichever: the nodes share no file
// system, and only rank 0 writes checkpoints, so after a re-plan rank 0 may run where
// none are. Every rank given --resume reads its checkpoint's step; the newest wins (the
// lowest rank holding it, when several do), and that rank sends the model state and the
// Adam moments over the collectives, in the model's parameter order. nullopt when no
// rank resumes. A checkpoint one rank cannot read fails every rank at once, each
// saying whose it was, rather than leaving the others waiting out --timeout; so does a
// newest step beyond --steps.
// `resume` is this rank's --resume ("" for none), `steps` the run's --steps.
std::optional<Resumed> ResumeFromNewestCheckpoint(Communicator& communicator, Gpt& model, const std::string& resume,
                                                  std::int64_t steps, const GptConfig& config,
                                                  const TrainingRecipe& recipe, torch::Device device);

}  // namespace poplar
