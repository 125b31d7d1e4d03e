#include "planner/formats/hf_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

// A Transformers key and the poplar model file's key it becomes.
struct KeyPair {
  const char* hf;
  const char* poplar;
  bool required;
};

constexpr KeyPair kGpt2Keys[] = {{"n_layer", "n_layer", true},
                                 {"n_head", "n_head", true},
                                 {"n_embd", "n_embd", true},
                                 {"vocab_size", "vocab_size", true},
                                 {"n_positions", "block_size", true}};

constexpr KeyPair kLlamaKeys[] = {{"num_hidden_layers", "n_layer", true},
                                  {"num_attention_heads", "n_head", true},
                                  {"num_key_value_heads", "n_kv_head", false},
                                  {"hidden_size", "n_embd", true},
                                  {"intermediate_size", "intermediate_size", true},
                                  {"vocab_size", "vocab_size", true},
                                  {"max_position_embeddings", "block_size", true},
                                  {"rope_theta", "rope_theta", false},
                                  {"rms_norm_eps", "norm_eps", false},
                                  {"tie_word_embeddings", "tie_embeddings", false}};

template <std::size_t n>
std::string HfWords(std::string text, const KeyPair (&keys)[n]) {
  for (const KeyPair& key : keys) {
    text = std::regex_replace(text, std::regex(std::string("\\b") + key.poplar + "\\b"), key.hf);
  }
  return text;
}

// The poplar model of the keys `keys` of `fields`, checked by ReadModelConfig; its errors
// name the Transformers keys.
template <std::size_t n>
ModelConfig ReadMapped(JsonFields& fields, const nlohmann::json& document, const char* arch, const KeyPair (&keys)[n]) {
  nlohmann::json object = {{"arch", arch}};
  for (const KeyPair& key : keys) {
    if (key.required && !fields.Has(key.hf)) fields.Fail(key.hf, "is required");
    if (fields.Has(key.hf)) object[key.poplar] = document.at(key.hf);
  }
  try {
    JsonFields mapped(object, fields.file(), "");
    return ReadModelConfig(mapped);
  } catch (const InputError& error) {
    throw InputError(error.file(), HfWords(error.key(), keys), HfWords(error.reason(), keys));
  }
}

void RefuseTrue(JsonFields& fields, const std::string& key, const std::string& why) {
  if (fields.Boolean(key, false)) fields.Fail(key, "is true: " + why + ", which poplar's model does not have");
}

void RequireString(JsonFields& fields, const std::string& key, const std::vector<std::string>& allowed) {
  if (!fields.Has(key)) return;
  const std::string value = fields.String(key);
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  std::string names;
  for (const std::string& name : allowed) names += (names.empty() ? "\"" : " or \"") + name + "\"";
  fields.Fail(key, "must be " + names + " (what poplar's model computes), got \"" + Printable(value) + "\"");
}

ModelConfig ReadGpt2(JsonFields& fields, const nlohmann::json& document) {
  const ModelConfig config = ReadMapped(fields, document, "gpt", kGpt2Keys);
  RequireString(fields, "activation_function", {"gelu_new", "gelu"});
  if (fields.Has("n_inner") && fields.Integer("n_inner") != 4 * std::int64_t{config.n_embd}) {
    fields.Fail("n_inner", "must be 4 n_embd (" + std::to_string(4 * config.n_embd) + "), poplar's MLP width");
  }
  if (fields.Has("layer_norm_epsilon") && fields.Number("layer_norm_epsilon") != 1e-5) {
    fields.Fail("layer_norm_epsilon", "must be 1e-05, poplar's LayerNorm epsilon");
  }
  if (fields.Has("scale_attn_weights") && !fields.Boolean("scale_attn_weights", true)) {
    fields.Fail("scale_attn_weights",
                "is false: attention without 1/sqrt(head size), which poplar's model does not have");
  }
  RefuseTrue(fields, "scale_attn_by_inverse_layer_idx", "attention scaled by its layer");
  RefuseTrue(fields, "add_cross_attention", "cross-attention");
  return config;
}

ModelConfig ReadLlama(JsonFields& fields, const nlohmann::json& document) {
  const ModelConfig config = ReadMapped(fields, document, "llama", kLlamaKeys);
  if (fields.Has("rope_scaling")) fields.Fail("rope_scaling", "must be null: poplar's rotary embeddings are unscaled");
  RefuseTrue(fields, "attention_bias", "biases in the attention's projections");
  RefuseTrue(fields, "mlp_bias", "biases in the MLP");
  RequireString(fields, "hidden_act", {"silu"});
  if (fields.Has("head_dim") && fields.Integer("head_dim") != config.head_size()) {
    fields.Fail("head_dim", "must be hidden_size / num_attention_heads (" + std::to_string(config.head_size()) +
                                "), got " + std::to_string(fields.Integer("head_dim")));
  }
  return config;
}

}  // namespace

ModelConfig ModelConfigFromHuggingFace(const std::string& text, const std::string& path) {
  const nlohmann::json document = ParseJsonObject(text, path);
  JsonFields fields(document, path, "");
  const std::string model_type = fields.String("model_type");
  if (model_type == "gpt2") return ReadGpt2(fields, document);
  if (model_type == "llama") return ReadLlama(fields, document);
  fields.Fail("model_type",
              "must be \"gpt2\" or \"llama\" (the architectures poplar trains), got \"" + Printable(model_type) + "\"");
}

ModelConfig LoadModelConfigOrFolder(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return LoadModelConfig(path);
  const std::string config = (std::filesystem::path(path) / "config.json").string();
  return ModelConfigFromHuggingFace(ReadTextFile(config), config);
}

}  // namespace poplar
