// Resuming a training run from a checkpoint (--resume): the newest any rank holds, sent
// to every rank over the collectives (docs/worker.md, "Checkpoints").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/comm/communicator.h"
#include "launcher/model/decoder.h"
#include "launcher/zero/training_engine.h"
#include "planner/formats/checkpoint_line.h"
#include "planner/formats/checkpoint_meta.h"
#include "planner/formats/model_config.h"
#include "planner/formats/training_recipe.h"

namespace poplar {

// What a resumed rank starts from besides the model's parameters.
struct Resumed {
  std::int64_t step = 0;
  CheckpointLine line;  // of the run that wrote the checkpoint
  int source = 0;       // the rank that read the checkpoint and sends it
  // The checkpoint's loss scaler state and updates taken, when it recorded them.
  std::optional<LossScaleRecord> loss_scale;
  // The checkpoint's adaptive batch sequence, when it recorded one.
  std::optional<BatchRecord> batch;
  // Every parameter's name and shape, in the model's order (the order the moments go in).
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameters;
  // The checkpoint's Adam moments as the source read them (host memory); empty on the
  // other ranks. SendResumedMoments hands them over.
  std::map<std::string, AdamMoments> moments;
};

// Resuming needs the checkpoint on one rank only, whichever: the nodes share no file
// system, and only rank 0 writes checkpoints, so after a re-plan rank 0 may run where
// none are. Every rank given --resume reads its checkpoint's step; the newest wins (the
// lowest rank holding it, when several do), and that rank sends the model state and the
// Adam moments over the collectives, in the model's parameter order. nullopt when no
// rank resumes. A checkpoint one rank cannot read fails every rank at once, each
// saying whose it was, rather than leaving the others waiting out --timeout; so does a
// newest step beyond --steps.
// `resume` is this rank's --resume ("" for none), `steps` the run's --steps. The model's
// parameters are sent here, before the engine takes them over; the moments later, by
// SendResumedMoments.
std::optional<Resumed> ResumeFromNewestCheckpoint(Communicator& communicator, Decoder& model, const std::string& resume,
                                                  std::int64_t steps, const ModelConfig& config,
                                                  const TrainingRecipe& recipe, torch::Device device);

// Sends the resumed Adam moments from the source to every rank's engine, one parameter at
// a time, each straight into the rank's shards, and sets the engine's step count
// (collective: every rank calls it). Beyond its shards a rank holds one parameter's two
// fp32 moments at a time: the whole moments are 8 bytes a parameter, more than stage 3's
// share of all the states on 3 or more ranks, so a rank whose memory fits the run fits
// its resume too. The source's host copy is released as it goes.
void SendResumedMoments(Communicator& communicator, TrainingEngine& engine, Resumed& resumed, torch::Device device);

}  // namespace poplar
