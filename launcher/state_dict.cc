#include "launcher/state_dict.h"

#include <set>

#include "planner/input_error.h"
#include "planner/text_file.h"

namespace poplar {

std::string ShapeText(const torch::Tensor& tensor) {
  std::string text = "[";
  for (int64_t i = 0; i < tensor.dim(); ++i) text += (i ? ", " : "") + std::to_string(tensor.size(i));
  return text + "]";
}

StateDict ReadStateDict(const std::string& path) {
  const std::string bytes = ReadTextFile(path);
  c10::IValue value;
  try {
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& error) {
    std::string reason = error.what();
    reason = reason.substr(0, reason.find('\n'));
    throw InputError(path, "", "not a state dict saved with torch.save(dict): " + reason);
  }
  if (!value.isGenericDict()) {
    throw InputError(path, "", "holds a " + value.tagKind() +
                                   ", not a dict of tensors (save dict(model.state_dict()))");
  }
  StateDict tensors;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString()) throw InputError(path, "", "has a key that is not a string");
    const std::string name = entry.key().toStringRef();
    if (!entry.value().isTensor()) throw InputError(path, name, "is not a tensor");
    tensors[name] = entry.value().toTensor();
  }
  return tensors;
}

void WriteStateDict(const std::string& path, const StateDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.contiguous().clone());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  WriteFileAtomically(path, std::string(bytes.begin(), bytes.end()));
}

StateDict ModelStateDict(const Gpt& model) {
  StateDict tensors;
  for (const auto& [name, parameter] : model->NamedParameters()) {
    tensors[name] = parameter.detach().cpu().clone();
  }
  tensors[kTiedHeadName] = tensors.at(kTokenEmbeddingName);
  return tensors;
}

void LoadModelState(Gpt& model, const StateDict& tensors, const std::string& file) {
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;
  for (auto& [name, parameter] : model->NamedParameters()) {
    expected.insert(name);
    auto found = tensors.find(name);
    if (found == tensors.end()) throw InputError(file, name, "is missing");
    if (found->second.sizes() != parameter.sizes()) {
      throw InputError(file, name, "has shape " + ShapeText(found->second) + ", the model needs " +
                                       ShapeText(parameter));
    }
    parameter.copy_(found->second.to(torch::kFloat32));
  }
  for (const auto& [name, tensor] : tensors) {
    if (name == kTiedHeadName) {
      if (!tensor.to(torch::kFloat32).equal(tensors.at(kTokenEmbeddingName).to(torch::kFloat32))) {
        throw InputError(file, name, "differs from " + std::string(kTokenEmbeddingName) +
                                         " but the head is tied to the embedding");
      }
    } else if (!expected.count(name)) {
      throw InputError(file, name, "is not a parameter of this model");
    }
  }
}

}  // namespace poplar
