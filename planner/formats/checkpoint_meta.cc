#include "planner/formats/checkpoint_meta.h"

#include "planner/base/json_fields.h"
#include "planner/formats/training_limits.h"
#include "planner/formats/worker_plan.h"

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

BatchRecord ReadBatch(JsonFields fields, std::int64_t step) {
  BatchRecord record;
  if (step > kMostJobSteps) {
    fields.Fail("sequence", "belongs to a checkpoint of step " + std::to_string(step) +
                                ", beyond the most steps a job trains (2^40)");
  }
  const nlohmann::json& sequence = fields.List("sequence", 1, "stretches of steps, each at one batch");
  std::int64_t samples = 0;
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    JsonFields stretch(sequence[i], fields.file(), fields.KeyPath("sequence") + "[" + std::to_string(i) + "]");
    const bool first = record.sequence.empty();
    const std::int64_t low = first ? 0 : record.sequence.back().from_step + 1;
    const std::int64_t high = first ? 0 : step - 1;
    if (high < low) {
      stretch.Fail("from_step",
                   "is of a stretch too many: the checkpoint's " + std::to_string(step) + " steps leave none for it");
    }
    const std::int64_t from = stretch.IntegerIn(
        "from_step", low, high,
        first ? "step 0 (the run's start)" : "a step after the last stretch's, before the checkpoint's");
    const std::int64_t batch = stretch.IntegerIn("batch", 1, kMostGlobalBatch, "a number of samples");
    stretch.Finish();
    if (!record.sequence.empty()) samples += record.sequence.back().batch * (from - record.sequence.back().from_step);
    record.sequence.push_back({from, batch});
  }
  samples += record.sequence.back().batch * (step - record.sequence.back().from_step);
  record.samples_done = fields.IntegerIn("samples_done", 0, kMostGlobalBatch * kMostJobSteps, "a number of samples");
  if (record.samples_done != samples) {
    fields.Fail("samples_done", "is " + std::to_string(record.samples_done) + " but the sequence's steps trained " +
                                    std::to_string(samples));
  }
  fields.Finish();
  return record;
}

}  // namespace

nlohmann::ordered_json BatchObject(const BatchRecord& record) {
  nlohmann::ordered_json sequence = nlohmann::ordered_json::array();
  for (const BatchStretch& stretch : record.sequence) {
    sequence.push_back({{"from_step", stretch.from_step}, {"batch", stretch.batch}});
  }
  return {{"sequence", sequence}, {"samples_done", record.samples_done}};
}

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
  if (fields.Has("batch")) parsed.batch = ReadBatch(fields.Map("batch"), parsed.step);
  fields.Finish();
  return parsed;
}

}  // namespace poplar
