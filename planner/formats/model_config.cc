#include "planner/formats/model_config.h"

#include <nlohmann/json.hpp>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

int PositiveField(JsonFields& fields, const std::string& key, std::int64_t most) {
  return static_cast<int>(fields.IntegerIn(key, 1, most, "an integer"));
}

}  // namespace

std::int64_t GptConfig::ParameterCount() const {
  const std::int64_t c = n_embd;
  const std::int64_t per_block = 12 * c * c + 13 * c;  // attn 4c^2+4c, mlp 8c^2+5c, 2 LN 4c
  return static_cast<std::int64_t>(vocab_size) * c + static_cast<std::int64_t>(block_size) * c + n_layer * per_block +
         2 * c;
}

bool GptConfig::operator==(const GptConfig& other) const {
  return n_layer == other.n_layer && n_head == other.n_head && n_embd == other.n_embd &&
         vocab_size == other.vocab_size && block_size == other.block_size;
}

GptConfig ParseModelConfig(const std::string& text, const std::string& file) {
  const nlohmann::json document = ParseJsonObject(text, file);
  JsonFields fields(document, file, "");
  return ReadModelConfig(fields);
}

nlohmann::ordered_json ModelConfigObject(const GptConfig& config) {
  return {{"arch", "gpt"},           {"n_layer", config.n_layer},       {"n_head", config.n_head},
          {"n_embd", config.n_embd}, {"vocab_size", config.vocab_size}, {"block_size", config.block_size}};
}

std::string ModelConfigJson(const GptConfig& config) { return ModelConfigObject(config).dump(); }

GptConfig ReadModelConfig(JsonFields& fields) {
  const std::string arch = fields.String("arch");
  if (arch != "gpt") fields.Fail("arch", "must be \"gpt\", got \"" + arch + "\"");
  GptConfig config;
  config.n_layer = PositiveField(fields, "n_layer", 1000);
  config.n_head = PositiveField(fields, "n_head", 1000);
  config.n_embd = PositiveField(fields, "n_embd", 1 << 16);
  config.vocab_size = PositiveField(fields, "vocab_size", 65536);
  config.block_size = PositiveField(fields, "block_size", 1 << 16);
  if (config.n_embd % config.n_head != 0) {
    fields.Fail("n_embd", "must be divisible by n_head (" + std::to_string(config.n_head) + ")");
  }
  fields.Finish();
  return config;
}

GptConfig LoadModelConfig(const std::string& path) { return ParseModelConfig(ReadTextFile(path), path); }

}  // namespace poplar
