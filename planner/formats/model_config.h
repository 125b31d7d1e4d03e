// The model configuration file of `poplar-worker --model-config` (docs/formats.md):
//   {"arch": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32}
// The GPT is GPT-2 with nanoGPT's parameter names; training sequence length is block_size.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace poplar {

struct GptConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;  // divisible by n_head
  int vocab_size = 0;
  int block_size = 0;  // sequence length

  // Parameters of the model (lm_head tied to wte, so counted once).
  std::int64_t ParameterCount() const;
  bool operator==(const GptConfig& other) const;
  bool operator!=(const GptConfig& other) const { return !(*this == other); }
};

class JsonFields;

// Throws InputError naming the file and key.
GptConfig ParseModelConfig(const std::string& text, const std::string& file);
GptConfig LoadModelConfig(const std::string& path);
// The same checks on an object inside another file (a profile's model.config).
GptConfig ReadModelConfig(JsonFields& fields);
// The configuration as a model file has it, keys in the order above: what profiles,
// plans, checkpoints and the ranks' agreement record of a model.
nlohmann::ordered_json ModelConfigObject(const GptConfig& config);
// The same as one line of JSON text.
std::string ModelConfigJson(const GptConfig& config);

}  // namespace poplar
