// State dicts as Python's torch.save(dict) writes and torch.load reads them: a pickled
// dict of name -> tensor (docs/formats.md, state dicts and checkpoints). Python's
// model.state_dict() is an OrderedDict, which libtorch 1.13 cannot read: save
// dict(model.state_dict()).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "launcher/model/decoder.h"

namespace poplar {

using StateDict = std::map<std::string, torch::Tensor>;

// "[4, 32]": a tensor's shape as errors show it.
std::string ShapeText(const torch::Tensor& tensor);

// Throws InputError naming the file: unreadable, not a pickled dict of tensors.
StateDict ReadStateDict(const std::string& path);
// Atomic write (temporary name, then rename).
void WriteStateDict(const std::string& path, const StateDict& tensors);

// The model's full state dict with its checkpoint names, a tied head under both names.
// Tensors are copies.
StateDict ModelStateDict(const DecoderImpl& model);
// Copies `tensors` into the model's parameters. Every parameter must be present with
// its shape; a tied head's second name, if present, must equal the embedding; unknown
// keys are errors. `file` names the source in errors.
void LoadModelState(DecoderImpl& model, const StateDict& tensors, const std::string& file);

}  // namespace poplar
