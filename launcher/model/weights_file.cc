#include "launcher/model/weights_file.h"

#include <filesystem>
#include <string_view>

#include "launcher/model/safetensors_file.h"

namespace poplar {
namespace {

bool EndsWith(std::string_view text, std::string_view end) {
  return text.size() >= end.size() && text.substr(text.size() - end.size()) == end;
}

bool IsSafetensors(const std::string& path) { return EndsWith(path, ".safetensors"); }

// GPT-2's Conv1D weights, [in, out]: their transposes are nanoGPT's Linear weights.
bool IsConv1DWeight(const std::string& name) {
  return EndsWith(name, ".attn.c_attn.weight") || EndsWith(name, ".attn.c_proj.weight") ||
         EndsWith(name, ".mlp.c_fc.weight") || EndsWith(name, ".mlp.c_proj.weight");
}

constexpr std::string_view kGptPrefix = "transformer.";

// Transformers' GPT-2 names and layout -> nanoGPT's.
StateDict FromGpt2Layout(const StateDict& hf) {
  StateDict state;
  for (const auto& [key, tensor] : hf) {
    if (EndsWith(key, ".attn.bias") || EndsWith(key, ".attn.masked_bias")) continue;  // buffers, not weights
    const std::string name = key == "lm_head.weight" || key.rfind(kGptPrefix, 0) == 0 ? key : "transformer." + key;
    state[name] = IsConv1DWeight(name) && tensor.dim() == 2 ? tensor.t().contiguous() : tensor;
  }
  return state;
}

// nanoGPT's names and layout -> Transformers' GPT-2, the tied head left out.
StateDict ToGpt2Layout(const StateDict& state) {
  StateDict hf;
  for (const auto& [name, tensor] : state) {
    if (name == "lm_head.weight") continue;
    hf[name] = IsConv1DWeight(name) ? tensor.t().contiguous() : tensor;
  }
  return hf;
}

}  // namespace

StateDict ReadWeights(const std::string& path, const ModelConfig& config) {
  std::error_code error;
  const bool folder = std::filesystem::is_directory(path, error);
  if (!folder && !IsSafetensors(path)) return ReadStateDict(path);
  const StateDict hf = folder ? ReadHuggingFaceFolder(path) : ReadSafetensors(path);
  return config.arch == Architecture::kGpt ? FromGpt2Layout(hf) : hf;
}

void WriteWeights(const std::string& path, const StateDict& state, const ModelConfig& config) {
  if (!IsSafetensors(path)) return WriteStateDict(path, state);
  if (config.arch == Architecture::kGpt) return WriteSafetensors(path, ToGpt2Layout(state));
  StateDict hf = state;
  if (config.tie_embeddings) hf.erase("lm_head.weight");
  WriteSafetensors(path, hf);
}

}  // namespace poplar
