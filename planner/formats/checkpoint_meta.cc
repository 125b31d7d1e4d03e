#include "planner/formats/checkpoint_meta.h"

#include "planner/base/json_fields.h"

namespace poplar {
namespace {

LossScaleRecord ReadLossScale(JsonFields fields, std::int64_t step) {
  LossScaleRecord record;
  record.scale = fields.NumberIn("scale", 1e-300, 1e300, "a positive number");
  record.growth_tracker = fields.IntegerIn("growth_tracker", 0, std::int64_t{1} << 40, "a number of steps");
  record.optimizer_steps = fields.IntegerIn("optimizer_steps", 0, step, "a number of updates, at most the step");
  fields.Finish();
  return record;
}

}  // namespace

nlohmann::ordered_json LossScaleObject(const LossScaleRecord& record) {
  return {
      {"scale", record.scale}, {"growth_tracker", record.growth_tracker}, {"optimizer_steps", record.optimizer_steps}};
}

CheckpointMeta ParseCheckpointMeta(const std::string& text, const std::string& path) {
  const nlohmann::json meta = ParseJsonObject(text, path);
  JsonFields fields(meta, path, "");
  if (const std::string format = fields.String("format"); format != kCheckpointFormat) {
    fields.Fail("format", std::string("must be \"") + kCheckpointFormat + "\", got \"" + format + "\"");
  }
  CheckpointMeta parsed;
  parsed.step = fields.Integer("step");
  if (parsed.step < 0) fields.Fail("step", "must be zero or more, got " + std::to_string(parsed.step));
  parsed.model = fields.Child("model");
  if (parsed.model.is_null()) {
    fields.Fail("model", "is required: the model configuration the checkpoint was trained with");
  }
  JsonFields recipe = fields.Map("training");
  parsed.training = ReadRecipe(recipe);
  parsed.line = ReadLineKeys(fields);
  if (!parsed.line.ancestors.empty() && parsed.line.ancestors.back().step > parsed.step) {
    fields.Fail("line", "goes on from step " + std::to_string(parsed.line.ancestors.back().step) +
                            ", after this checkpoint's step " + std::to_string(parsed.step));
  }
  if (fields.Has("loss_scale")) parsed.loss_scale = ReadLossScale(fields.Map("loss_scale"), parsed.step);
  fields.Finish();
  return parsed;
}

}  // namespace poplar
