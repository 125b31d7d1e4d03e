#include "planner/formats/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"
#include "planner/formats/worker_plan.h"

namespace poplar {
namespace {

// The most a measured time (a micro-batch, an optimizer step) may take: a day.
constexpr double kMostMeasuredSeconds = 86400;
// The least a micro-batch's compute may take: a nanosecond.
constexpr double kLeastMeasuredSeconds = 1e-9;

constexpr const char* kFormat = "poplar-profile/1";

ProfilePoint ParsePoint(JsonFields fields) {
  ProfilePoint point;
  point.micro_batch = static_cast<int>(fields.IntegerIn("micro_batch", 1, kMostMicroBatch, "a number of samples"));
  // A micro-batch of more than a day is a typing mistake, and one of less than a
  // nanosecond too: a subnormal time would make a micro-batch cost the search nothing.
  point.compute_s = fields.NumberIn("compute_s", kLeastMeasuredSeconds, kMostMeasuredSeconds,
                                    "a number of seconds from 1e-9 to 86400");
  point.peak_bytes = fields.Integer("peak_bytes");  // never a float cast unchecked
  if (point.peak_bytes <= 0) fields.Fail("peak_bytes", "must be a positive number of bytes");
  if (fields.Has("graph_compute_s")) {
    point.graph_compute_s = fields.NumberIn("graph_compute_s", kLeastMeasuredSeconds, kMostMeasuredSeconds,
                                            "a number of seconds from 1e-9 to 86400");
  }
  fields.Finish();
  return point;
}

// `most`: the most parameters one kind of collective may move in a step or round.
CollectiveUse ParseCollectiveUse(JsonFields fields, std::int64_t most) {
  CollectiveUse use;
  use.params = fields.Integer("params");
  if (use.params < 0 || use.params > most) {
    fields.Fail("params", "must be a number of parameters from 0 to 4 x model.params (" + std::to_string(most) +
                              "), got " + std::to_string(use.params));
  }
  use.calls = static_cast<int>(fields.IntegerIn("calls", 0, 1'000'000, "a number of calls"));
  if ((use.params > 0) != (use.calls > 0)) fields.Fail("calls", "must be positive exactly when params is");
  fields.Finish();
  return use;
}

// The most parameters a stage's collectives may move in a step or round, or have in
// flight at once. A stage-3 round gathers the model twice (forward and backward); 4x
// leaves room for the padding that makes buckets divide among ranks. 2^62 made a step of
// twenty years.
std::int64_t MostCollectiveElements(std::int64_t model_params) { return std::min(model_params, INT64_MAX / 4) * 4; }

CollectiveParams ParseCollectiveParams(JsonFields fields, std::int64_t model_params) {
  CollectiveParams params;
  const std::int64_t most = MostCollectiveElements(model_params);
  for (const auto& [key, field] : kCollectiveParamsFields) params.*field = ParseCollectiveUse(fields.Map(key), most);
  fields.Finish();
  return params;
}

StageProfile ParseStage(JsonFields fields, std::int64_t model_params) {
  StageProfile stage;
  stage.stage = static_cast<int>(fields.IntegerIn("stage", 0, 3, "a ZeRO stage"));
  if (fields.Has("world_size")) {
    stage.world_size = static_cast<int>(fields.IntegerIn("world_size", 1, 1'000'000, "a number of ranks"));
  } else {
    fields.Child("world_size");
  }
  if (fields.Has("state_share")) {
    if (stage.stage == 0) fields.Fail("state_share", "stage 0 partitions no state");
    stage.state_share = fields.NumberIn("state_share", std::numeric_limits<double>::denorm_min(), 1,
                                        "a fraction of the partitioned state in (0, 1]");
  } else {
    fields.Child("state_share");
  }
  stage.max_micro_batch =
      static_cast<int>(fields.IntegerIn("max_micro_batch", 0, kMostMicroBatch, "a number of samples"));
  stage.optimizer_step_s =
      fields.NumberIn("optimizer_step_s", 0, kMostMeasuredSeconds, "a number of seconds from 0 to 86400");
  if (fields.Has("optimizer_fixed_s")) {
    if (stage.stage == 0) fields.Fail("optimizer_fixed_s", "stage 0 updates every parameter: nothing scales");
    stage.optimizer_fixed_s = fields.NumberIn("optimizer_fixed_s", 0, stage.optimizer_step_s,
                                              "a number of seconds from 0 to optimizer_step_s");
  } else {
    fields.Child("optimizer_fixed_s");
  }
  if (fields.Has("collectives")) {
    stage.collectives = ParseCollectiveParams(fields.Map("collectives"), model_params);
  } else {
    fields.Child("collectives");
  }
  if (fields.Has("collective_elements_in_flight")) {
    if (stage.stage == 0 && fields.Integer("collective_elements_in_flight") != 0) {
      fields.Fail("collective_elements_in_flight", "stage 0 runs no reduce-scatter or all-gather");
    }
    stage.collective_elements_in_flight = fields.IntegerIn(
        "collective_elements_in_flight", 0, MostCollectiveElements(model_params), "a number of elements");
  } else {
    fields.Child("collective_elements_in_flight");
  }
  const nlohmann::json& points = fields.List("points", 1, "a non-empty list of {micro_batch, compute_s, peak_bytes}");
  for (std::size_t i = 0; i < points.size(); ++i) {
    const std::string key = "points[" + std::to_string(i) + "]";
    stage.points.push_back(ParsePoint(JsonFields(points[i], fields.file(), fields.KeyPath(key))));
    if (i > 0 && stage.points[i].micro_batch <= stage.points[i - 1].micro_batch) {
      fields.Fail(key + ".micro_batch", "points must be in increasing micro_batch order");
    }
    if (stage.stage >= 2 && stage.points[i].graph_compute_s > 0) {
      fields.Fail(key + ".graph_compute_s",
                  "is for stages 0-1: stages 2-3 launch collectives inside every backward and never replay "
                  "from CUDA graphs");
    }
  }
  // A measured point ran, so it fitted; beyond the last point the compute line is
  // extrapolated up to max_micro_batch.
  const int largest_measured = stage.points.back().micro_batch;
  if (stage.max_micro_batch < largest_measured) {
    fields.Fail("max_micro_batch", "is " + std::to_string(stage.max_micro_batch) + " but micro-batch " +
                                       std::to_string(largest_measured) +
                                       " was measured (points), so it fits: it must be at least that");
  }
  fields.Finish();
  return stage;
}

ModelInfo ParseModel(JsonFields fields) {
  ModelInfo model;
  model.name = fields.OptionalString("name").value_or("");
  model.params = fields.Integer("params");
  if (model.params <= 0) fields.Fail("params", "must be a positive parameter count");
  const std::string precision = fields.String("precision");
  auto parsed = ParsePrecision(precision);
  if (!parsed) fields.Fail("precision", "must be fp32 or mixed, got '" + precision + "'");
  model.precision = *parsed;
  if (fields.Has("config")) {
    JsonFields config = fields.Map("config");
    model.config = ReadModelConfig(config);
    if (model.config->ParameterCount() != model.params) {
      fields.Fail("params", "is " + std::to_string(model.params) + " but model.config has " +
                                std::to_string(model.config->ParameterCount()) + " parameters");
    }
  } else {
    fields.Child("config");
  }
  fields.Finish();
  return model;
}

}  // namespace

const StageProfile* DeviceProfile::Stage(int stage) const {
  for (const auto& entry : stages) {
    if (entry.stage == stage) return &entry;
  }
  return nullptr;
}

std::string DeviceTypeProblem(const std::string& type) {
  // Letters, digits and ASCII punctuation: JSON files hold it as UTF-8 (a byte 0xff
  // failed the profile's write after minutes of measuring).
  const bool plain =
      IsPlainFileName(type) && std::all_of(type.begin(), type.end(), [](char c) { return c > ' ' && c <= '~'; });
  if (plain) return "";
  return "must be a plain name of ASCII letters, digits and punctuation without '/', not . or .. (it names "
         "the profile file <type>.json), got '" +
         Printable(type) + "'";
}

DeviceProfile ParseProfileJson(const std::string& text, const std::string& file) {
  const nlohmann::json document = ParseJsonObject(text, file);
  JsonFields fields(document, file, "");
  DeviceProfile profile;
  profile.file = file;
  const std::string format = fields.String("format");
  if (format != kFormat) {
    fields.Fail("format", "must be \"" + std::string(kFormat) + "\", got \"" + format + "\"");
  }
  profile.device_type = fields.String("device_type");
  profile.memory_bytes = fields.Integer("memory_bytes");
  if (profile.memory_bytes <= 0) {
    fields.Fail("memory_bytes", "must be a positive number of bytes, got " + std::to_string(profile.memory_bytes));
  }
  profile.emulated = fields.Boolean("emulated", false);
  if (fields.Has("bf16")) profile.bf16 = fields.Boolean("bf16", true);
  profile.source = fields.OptionalString("source").value_or("");
  profile.model = ParseModel(fields.Map("model"));
  const nlohmann::json& stages = fields.List("stages", 1, "a non-empty list of stage measurements");
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string key = "stages[" + std::to_string(i) + "]";
    StageProfile stage = ParseStage(JsonFields(stages[i], file, key), profile.model.params);
    if (profile.Stage(stage.stage)) {
      fields.Fail(key + ".stage", "stage " + std::to_string(stage.stage) + " appears twice");
    }
    // A measured peak above the capacity would have run out of memory.
    for (std::size_t p = 0; p < stage.points.size(); ++p) {
      if (stage.points[p].peak_bytes > profile.memory_bytes) {
        fields.Fail(key + ".points[" + std::to_string(p) + "].peak_bytes",
                    "is " + std::to_string(stage.points[p].peak_bytes) + ", above memory_bytes (" +
                        std::to_string(profile.memory_bytes) + "): no measurement can use more than the device has");
      }
    }
    profile.stages.push_back(std::move(stage));
  }
  fields.Finish();
  return profile;
}

DeviceProfile LoadProfileFile(const std::string& path) { return ParseProfileJson(ReadTextFile(path), path); }

std::string HeldShareText(double share) { return share >= 1 ? "all" : "1/" + std::to_string(std::llround(1 / share)); }

std::string ProfileToJson(const DeviceProfile& profile) {
  nlohmann::ordered_json root;
  root["format"] = kFormat;
  root["device_type"] = profile.device_type;
  root["memory_bytes"] = profile.memory_bytes;
  root["emulated"] = profile.emulated;
  if (profile.bf16) root["bf16"] = *profile.bf16;
  if (!profile.source.empty()) root["source"] = profile.source;  // optional keys: absent
  root["model"] = nlohmann::ordered_json::object();              // when empty
  if (!profile.model.name.empty()) root["model"]["name"] = profile.model.name;
  root["model"]["params"] = profile.model.params;
  root["model"]["precision"] = PrecisionName(profile.model.precision);
  if (profile.model.config) root["model"]["config"] = ModelConfigObject(*profile.model.config);
  root["stages"] = nlohmann::ordered_json::array();
  for (const auto& stage : profile.stages) {
    nlohmann::ordered_json entry;
    entry["stage"] = stage.stage;
    entry["world_size"] = stage.world_size;
    if (stage.state_share) entry["state_share"] = *stage.state_share;
    entry["max_micro_batch"] = stage.max_micro_batch;
    entry["optimizer_step_s"] = stage.optimizer_step_s;
    if (stage.optimizer_fixed_s) entry["optimizer_fixed_s"] = *stage.optimizer_fixed_s;
    if (stage.collectives) {
      nlohmann::ordered_json collectives;
      for (const auto& [key, field] : kCollectiveParamsFields) {
        const CollectiveUse& use = (*stage.collectives).*field;
        collectives[key] = {{"params", use.params}, {"calls", use.calls}};
      }
      entry["collectives"] = std::move(collectives);
    }
    if (stage.collective_elements_in_flight > 0) {
      entry["collective_elements_in_flight"] = stage.collective_elements_in_flight;
    }
    entry["points"] = nlohmann::ordered_json::array();
    for (const auto& point : stage.points) {
      nlohmann::ordered_json written = {
          {"micro_batch", point.micro_batch}, {"compute_s", point.compute_s}, {"peak_bytes", point.peak_bytes}};
      if (point.graph_compute_s > 0) written["graph_compute_s"] = point.graph_compute_s;
      entry["points"].push_back(std::move(written));
    }
    root["stages"].push_back(std::move(entry));
  }
  return root.dump(2) + "\n";
}

}  // namespace poplar
