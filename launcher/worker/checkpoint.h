// Training checkpoints: full (unsharded) model and Adam state, so a run can resume on a
// different plan and a different number of ranks.
//
// Layout: DIR/step-00000012/{model.pt, optimizer.pt, meta.json} and DIR/latest naming
// the newest complete step folder. model.pt is a torch.save-compatible state dict with
// nanoGPT names; optimizer.pt holds exp_avg.<name> and exp_avg_sq.<name>; meta.json the
// step count, the model configuration, the training recipe (training_recipe.h) and the
// line of training (checkpoint_line.h). A step folder is written under a temporary
// name and renamed when complete, then `latest` is replaced atomically: a crash at any
// moment leaves the previous checkpoint intact and `latest` pointing at a complete one.
// DIR/.poplar.lock is the writing run's lock (LockCheckpointFolder).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "launcher/model/state_dict.h"
#include "launcher/zero/training_engine.h"
#include "planner/base/folder_lock.h"
#include "planner/formats/checkpoint_line.h"
#include "planner/formats/checkpoint_meta.h"
#include "planner/formats/model_config.h"
#include "planner/formats/training_recipe.h"

namespace poplar {

struct Checkpoint {
  std::int64_t step = 0;  // steps completed
  StateDict model;
  std::map<std::string, AdamMoments> moments;
  std::optional<LossScaleRecord> loss_scale;  // a dynamic loss scaler's, when one runs
  std::optional<BatchRecord> batch;           // an adaptive batch's sequence, in such a run
};

// Written by rank 0; `checkpoint` must hold full tensors. dir/step-NNNNNNNN is written
// whole (in a temporary folder, flushed to the disk) before it takes its name, and
// dir/latest is replaced only then, so `latest` always names a complete step folder,
// even across a SIGKILL or a power loss (a step written again swaps in atomically).
// meta.json records `config`, `training` (the run's recipe) and `line` (the
// writing run's, checkpoint_line.h; nothing for a line of run 0).
void WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint, const ModelConfig& config,
                     const TrainingRecipe& training, const CheckpointLine& line);

// Throws "training diverged at step N: <name> holds inf or nan after its update, so
// <not_written>. ..." when a floating-point tensor of `tensors` is not finite: the
// check before any state to go on from is written (a checkpoint, --save).
void RequireFiniteState(const StateDict& tensors, std::int64_t step, const std::string& not_written);

// Keeps the `keep` newest step folders of `line` in `dir` (keep 0: every one) and the
// one `latest` names, and removes every step folder older than the oldest kept. Whose
// line a folder is on its meta.json says (a folder it cannot read is on none). Another
// line's folders are not counted (they would take the place of this run's own): those
// newer than that are left, replaced as this run reaches their steps or removed once
// they are older than the oldest it keeps. After WriteCheckpoint, so that a crash at
// any moment leaves `latest` on a complete folder.
void PruneCheckpoints(const std::string& dir, std::int64_t keep, const CheckpointLine& line);

// The name of the folder of the checkpoint after `step` steps: "step-00000012".
std::string StepFolderName(std::int64_t step);

// Makes `dir` ready to hold checkpoints before training starts, so that what would stop
// the first checkpoint stops the job at once instead: creates the folder, checks that
// files can be made in it and refuses a `latest` that is not a regular file. `flag` names
// it in errors.
void PrepareCheckpointFolder(const std::string& dir, const std::string& flag);

// The lock of the run that writes checkpoints into `dir` (rank 0's), held while it
// runs: two runs on one folder would overwrite each other's step folders and `latest`,
// and a resume would go on from the other run's state. Throws InputError(`flag`) naming
// the run that holds it; on a file system without locks, warns and returns nothing.
// Then removes the temporaries that writers no longer running (a SIGKILL, a power loss)
// left behind.
std::optional<FolderLock> LockCheckpointFolder(const std::string& dir, const std::string& flag);

// What a checkpoint gives back besides the parameters, which RestoreCheckpoint copies
// into the model. The moments are as read, on the CPU.
struct RestoredCheckpoint {
  std::int64_t step = 0;
  std::map<std::string, AdamMoments> moments;
  TrainingRecipe training;  // of the run that wrote it
  CheckpointLine line;      // of the run that wrote it; run 0 when it recorded none
  std::optional<LossScaleRecord> loss_scale;
  std::optional<BatchRecord> batch;
};
// `path` is a step folder or a checkpoint folder with `latest`. Checks meta.json's model
// against `config` and reads its training recipe, loads model.pt into `model` (LoadModelState's checks, naming
// model.pt), and requires optimizer.pt to hold both moments of every parameter with its
// shape and nothing else. Throws InputError naming the file, key and reason; every file
// must be a regular file (a pipe would block past --timeout).
RestoredCheckpoint RestoreCheckpoint(const std::string& path, const ModelConfig& config, Decoder& model);
// The step of the checkpoint RestoreCheckpoint would read, from its meta.json alone (the
// same checks, none of the tensors).
std::int64_t CheckpointStep(const std::string& path, const ModelConfig& config);

}  // namespace poplar
