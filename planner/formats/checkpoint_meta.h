// A checkpoint's step folder records in meta.json what it holds (docs/formats.md): the
// format, the step, the model configuration it trained, the training recipe and the
// checkpoint line. The worker writes it beside model.pt and optimizer.pt, and reads it
// as untrusted text to resume.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "planner/formats/checkpoint_line.h"
#include "planner/formats/training_recipe.h"

namespace poplar {

inline constexpr char kCheckpointFormat[] = "poplar-checkpoint/1";

struct CheckpointMeta {
  std::int64_t step = 0;
  nlohmann::json model;  // the model configuration object, as written
  TrainingRecipe training;
  CheckpointLine line;
};

// `text`, the contents of `path` (named in errors), read as strictly as every file poplar
// reads (json_fields.h): a key given twice, an unknown key or a value of the wrong type is
// named. Throws InputError for another format, a negative step, no model, a recipe or
// line ReadRecipe or ReadLineKeys refuses, and a line that goes on from a later step.
CheckpointMeta ParseCheckpointMeta(const std::string& text, const std::string& path);

}  // namespace poplar
