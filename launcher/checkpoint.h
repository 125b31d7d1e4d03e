// Training checkpoints: full (unsharded) model and Adam state, so a run can resume on a
// different plan and a different number of ranks.
//
// Layout: DIR/step-00000012/{model.pt, optimizer.pt, meta.json} and DIR/latest naming
// the newest complete step folder. model.pt is a torch.save-compatible state dict with
// nanoGPT names; optimizer.pt holds exp_avg.<name> and exp_avg_sq.<name>; meta.json the
// step count and the model configuration. A step folder is written under a temporary
// name and renamed when complete, then `latest` is replaced atomically: a crash at any
// moment leaves the previous checkpoint intact and `latest` pointing at a complete one.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "planner/model_config.h"
#include "launcher/state_dict.h"
#include "launcher/training_engine.h"

namespace poplar {

struct Checkpoint {
  std::int64_t step = 0;  // optimizer steps completed
  StateDict model;
  std::map<std::string, AdamMoments> moments;
};

// Written by rank 0; `checkpoint` must hold full tensors. dir/step-NNNNNNNN is written
// whole (in a temporary folder, flushed to the disk) before it takes its name, and
// dir/latest is replaced only then, so `latest` always names a complete step folder,
// even across a SIGKILL or a power loss (a step written again swaps in atomically).
void WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint, const GptConfig& config);

// `path` is a step folder or a checkpoint folder with `latest`. Checks the model
// configuration against `config`. Throws InputError naming the file and the reason.
Checkpoint ReadCheckpoint(const std::string& path, const GptConfig& config);
// The step of the checkpoint ReadCheckpoint would read, from its meta.json alone (the
// same checks, none of the tensors).
std::int64_t CheckpointStep(const std::string& path, const GptConfig& config);

}  // namespace poplar
