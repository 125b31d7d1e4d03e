// The model configuration file of `poplar-worker --model-config` (docs/formats.md):
//   {"arch": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32}
//   {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 64, ...}
// `gpt` is GPT-2 with nanoGPT's parameter names; `llama` is Hugging Face's
// LlamaForCausalLM with its names. Training sequence length is block_size.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace poplar {

enum class Architecture { kGpt, kLlama };

struct ModelConfig {
  Architecture arch = Architecture::kGpt;
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;  // divisible by n_head
  int vocab_size = 0;
  int block_size = 0;  // sequence length
  // Llama only (ReadModelConfig fills the defaults; a GPT leaves them as here).
  int n_kv_head = 0;          // key/value heads; divides n_head (default n_head)
  int intermediate_size = 0;  // the MLP's width (default: Llama's 8/3 n_embd up to a multiple of 256)
  double rope_theta = 0;      // rotary base (default 10000)
  double norm_eps = 0;        // RMSNorm's epsilon (default 1e-6)
  bool tie_embeddings = false;

  int head_size() const { return n_embd / n_head; }
  // Parameters of the model, a tied head counted once.
  std::int64_t ParameterCount() const;
  // Forward and backward FLOPs per token (PaLM's accounting, as nanoGPT's estimate_mfu):
  // 6 per parameter that multiplies (a GPT's position embeddings do not) plus
  // attention's 12 · layers · block_size · width. A forward pass alone is a third.
  double TrainingFlopsPerToken() const;
  bool operator==(const ModelConfig& other) const;
  bool operator!=(const ModelConfig& other) const { return !(*this == other); }
};

// "gpt" or "llama".
const char* ArchitectureName(Architecture arch);

// Llama's default MLP width for a model width: 8/3 of it, rounded up to a multiple of 256.
int DefaultIntermediateSize(int n_embd);

class JsonFields;

// Throws InputError naming the file and key.
ModelConfig ParseModelConfig(const std::string& text, const std::string& file);
ModelConfig LoadModelConfig(const std::string& path);
// The same checks on an object inside another file (a profile's model.config).
ModelConfig ReadModelConfig(JsonFields& fields);
// The configuration as a model file has it, every key of its architecture written
// (defaults resolved), in the order above: what profiles, plans, checkpoints and the
// ranks' agreement record of a model.
nlohmann::ordered_json ModelConfigObject(const ModelConfig& config);
// The same as one line of JSON text.
std::string ModelConfigJson(const ModelConfig& config);

}  // namespace poplar
