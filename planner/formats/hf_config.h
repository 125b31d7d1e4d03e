// A Hugging Face model's config.json, in Transformers' keys, as a poplar model
// configuration (docs/formats.md, "Safetensors and Hugging Face folders"), read as
// untrusted input.
#pragma once

#include <string>

#include "planner/formats/model_config.h"

namespace poplar {

// The model of a Transformers config.json `text` (file `path`), model_type "gpt2" or
// "llama" (docs/formats.md gives the keys read). Keys that poplar does not need are
// ignored; those that would change the model into one poplar does not implement
// (llama: rope_scaling, attention_bias, mlp_bias, hidden_act other than silu, head_dim
// other than hidden_size / num_attention_heads; gpt2: activation_function other than
// gelu_new or gelu, n_inner other than 4 n_embd, layer_norm_epsilon other than 1e-5,
// ...) are refused, naming the key. The result passes ReadModelConfig's checks, whose
// errors name the Transformers key. GPT-2's gelu_new is GELU's tanh approximation;
// poplar's GPT computes the exact (erf) GELU, which differs from it by less than 5e-4.
ModelConfig ModelConfigFromHuggingFace(const std::string& text, const std::string& path);

// The model configuration at `path`: a poplar model file, or a Hugging Face model folder
// whose config.json ModelConfigFromHuggingFace reads. Throws InputError naming the file.
ModelConfig LoadModelConfigOrFolder(const std::string& path);

}  // namespace poplar
