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

// The Llama keys after n_head, n_embd: defaults from Hugging Face's LlamaConfig.
void ReadLlamaFields(JsonFields& fields, ModelConfig& config) {
  config.n_kv_head = fields.Has("n_kv_head") ? PositiveField(fields, "n_kv_head", 1000) : config.n_head;
  if (config.n_head % config.n_kv_head != 0) {
    fields.Fail("n_kv_head",
                "must divide n_head (" + std::to_string(config.n_head) + "), got " + std::to_string(config.n_kv_head));
  }
  if (config.head_size() % 2 != 0) {
    fields.Fail("n_embd", "must give heads of an even size for rotary embeddings (n_embd / n_head = " +
                              std::to_string(config.head_size()) + ")");
  }
  config.intermediate_size = fields.Has("intermediate_size") ? PositiveField(fields, "intermediate_size", 1 << 20)
                                                             : DefaultIntermediateSize(config.n_embd);
  config.rope_theta = fields.Has("rope_theta") ? fields.NumberIn("rope_theta", 1, 1e12, "a number") : 10000.0;
  config.norm_eps = fields.Has("norm_eps") ? fields.NumberIn("norm_eps", 1e-12, 1, "a number") : 1e-6;
  config.tie_embeddings = fields.Boolean("tie_embeddings", false);
}

}  // namespace

const char* ArchitectureName(Architecture arch) { return arch == Architecture::kLlama ? "llama" : "gpt"; }

int DefaultIntermediateSize(int n_embd) {
  const std::int64_t wide = (std::int64_t{8} * n_embd + 2) / 3;  // ceil(8 n_embd / 3)
  return static_cast<int>((wide + 255) / 256 * 256);
}

std::int64_t ModelConfig::ParameterCount() const {
  const std::int64_t c = n_embd, vocab = vocab_size;
  if (arch == Architecture::kLlama) {
    const std::int64_t kv = std::int64_t{n_kv_head} * head_size();
    const std::int64_t per_layer = 2 * c * c + 2 * c * kv + 3 * c * intermediate_size + 2 * c;  // q o, k v, mlp, norms
    return vocab * c * (tie_embeddings ? 1 : 2) + n_layer * per_layer + c;
  }
  const std::int64_t per_block = 12 * c * c + 13 * c;  // attn 4c^2+4c, mlp 8c^2+5c, 2 LN 4c
  return vocab * c + static_cast<std::int64_t>(block_size) * c + n_layer * per_block + 2 * c;
}

double ModelConfig::TrainingFlopsPerToken() const {
  const double positions = arch == Architecture::kGpt ? static_cast<double>(block_size) * n_embd : 0.0;
  return 6.0 * (static_cast<double>(ParameterCount()) - positions) + 12.0 * n_layer * block_size * n_embd;
}

bool ModelConfig::operator==(const ModelConfig& other) const {
  return arch == other.arch && n_layer == other.n_layer && n_head == other.n_head && n_embd == other.n_embd &&
         vocab_size == other.vocab_size && block_size == other.block_size && n_kv_head == other.n_kv_head &&
         intermediate_size == other.intermediate_size && rope_theta == other.rope_theta && norm_eps == other.norm_eps &&
         tie_embeddings == other.tie_embeddings;
}

ModelConfig ParseModelConfig(const std::string& text, const std::string& file) {
  const nlohmann::json document = ParseJsonObject(text, file);
  JsonFields fields(document, file, "");
  return ReadModelConfig(fields);
}

nlohmann::ordered_json ModelConfigObject(const ModelConfig& config) {
  nlohmann::ordered_json object = {
      {"arch", ArchitectureName(config.arch)}, {"n_layer", config.n_layer}, {"n_head", config.n_head}};
  if (config.arch == Architecture::kLlama) object["n_kv_head"] = config.n_kv_head;
  object["n_embd"] = config.n_embd;
  if (config.arch == Architecture::kLlama) object["intermediate_size"] = config.intermediate_size;
  object["vocab_size"] = config.vocab_size;
  object["block_size"] = config.block_size;
  if (config.arch == Architecture::kLlama) {
    object["rope_theta"] = config.rope_theta;
    object["norm_eps"] = config.norm_eps;
    object["tie_embeddings"] = config.tie_embeddings;
  }
  return object;
}

std::string ModelConfigJson(const ModelConfig& config) { return ModelConfigObject(config).dump(); }

ModelConfig ReadModelConfig(JsonFields& fields) {
  const std::string arch = fields.String("arch");
  ModelConfig config;
  if (arch == "llama") {
    config.arch = Architecture::kLlama;
  } else if (arch != "gpt") {
    fields.Fail("arch", "must be \"gpt\" or \"llama\", got \"" + arch + "\"");
  }
  config.n_layer = PositiveField(fields, "n_layer", 1000);
  config.n_head = PositiveField(fields, "n_head", 1000);
  config.n_embd = PositiveField(fields, "n_embd", 1 << 16);
  config.vocab_size = PositiveField(fields, "vocab_size", 1 << 24);
  config.block_size = PositiveField(fields, "block_size", 1 << 20);
  if (config.n_embd % config.n_head != 0) {
    fields.Fail("n_embd", "must be divisible by n_head (" + std::to_string(config.n_head) + ")");
  }
  if (config.arch == Architecture::kLlama) ReadLlamaFields(fields, config);
  fields.Finish();
  return config;
}

ModelConfig LoadModelConfig(const std::string& path) { return ParseModelConfig(ReadTextFile(path), path); }

}  // namespace poplar
