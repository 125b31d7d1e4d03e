// Model weights in the files users bring and take (docs/formats.md, "Weights files"):
//
// - a state dict as Python's torch.save writes it (any other path), in poplar's names
//   (state_dict.h): nanoGPT's for a GPT, Hugging Face's for a Llama;
// - a .safetensors file, or a Hugging Face model folder (model.safetensors, or shards
//   and their index), in Transformers' layout: a Llama as LlamaForCausalLM names it; a
//   GPT as GPT2LMHeadModel does, its attention and MLP weights transposed (GPT-2's
//   Conv1D stores [in, out] where nanoGPT's Linear stores [out, in]); names with or
//   without the `transformer.` prefix, and GPT-2's old attn.bias / attn.masked_bias
//   buffers ignored, are read. A tied head is written once, under the embedding's name,
//   as save_pretrained writes it.
#pragma once

#include <string>

#include "launcher/model/state_dict.h"
#include "planner/formats/model_config.h"

namespace poplar {

// The weights at `path` (a file, or a Hugging Face folder) in poplar's names and
// layouts, for LoadModelState. Throws InputError naming the file.
StateDict ReadWeights(const std::string& path, const ModelConfig& config);

// Writes `state` (poplar's names, a tied head under both) to `path` atomically: a
// .safetensors file in Transformers' layout where the name ends so, else a torch.save
// state dict.
void WriteWeights(const std::string& path, const StateDict& state, const ModelConfig& config);

}  // namespace poplar
