// A checkpoint's step folder records in meta.json what it holds (docs/formats.md): the
// format, the step, the model configuration it trained, the training recipe, the
// checkpoint line and, from a run with a dynamic loss scale, the scaler's state. The worker writes it beside model.pt
// and optimizer.pt, and reads it as untrusted text to resume.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/formats/checkpoint_line.h"
#include "planner/formats/training_recipe.h"

namespace poplar {

inline constexpr char kCheckpointFormat[] = "poplar-checkpoint/1";

// A dynamic loss scaler's state at the checkpoint (launcher/zero/loss_scaler.h), and the
// optimizer updates taken: the steps less those the scaler skipped.
struct LossScaleRecord {
  double scale = 0;
  std::int64_t growth_tracker = 0;
  std::int64_t optimizer_steps = 0;
};

// meta.json's "loss_scale" object.
nlohmann::ordered_json LossScaleObject(const LossScaleRecord& record);

// The batches of an adaptive batch's run up to the checkpoint (docs/worker.md,
// "Adaptive batch"), from step 0: each stretch of steps trained at one global batch, in
// order, and the samples they consumed (where the next step's batch starts). The first
// stretch's batch is the learning-rate rule's base.
struct BatchStretch {
  std::int64_t from_step = 0;
  std::int64_t batch = 0;
};
struct BatchRecord {
  std::vector<BatchStretch> sequence;
  std::int64_t samples_done = 0;
};

// meta.json's "batch" object.
nlohmann::ordered_json BatchObject(const BatchRecord& record);

struct CheckpointMeta {
  std::int64_t step = 0;
  nlohmann::json model;  // the model configuration object, as written
  TrainingRecipe training;
  CheckpointLine line;
  std::optional<LossScaleRecord> loss_scale;  // "loss_scale", when a scaler ran
  std::optional<BatchRecord> batch;           // "batch", from a run with an adaptive batch
};

// `text`, the contents of `path` (named in errors), read as strictly as every file poplar
// reads (json_fields.h): a key given twice, an unknown key or a value of the wrong type is
// named. Throws InputError for another format, a negative step, no model, a recipe or
// line ReadRecipe or ReadLineKeys refuses, a line that goes on from a later step, and a
// loss scale that is not a positive finite number, a negative growth tracker or more
// optimizer steps than steps.
CheckpointMeta ParseCheckpointMeta(const std::string& text, const std::string& path);

}  // namespace poplar
