// State dicts in Hugging Face's files (docs/formats.md, "Safetensors and Hugging Face
// folders"): a .safetensors file, and a model folder as Transformers' save_pretrained
// writes it. The checks of the untrusted bytes are planner/formats/safetensors.h's; this
// reads and writes the tensors. Tensors' bytes are little-endian, as the host's must be
// (checked at compile time).
#pragma once

#include <map>
#include <string>

#include "launcher/model/state_dict.h"

namespace poplar {

// Every tensor of the safetensors file `path`, on the CPU, of the file's dtype (F32,
// F16, BF16, F64, I64, I32, I16, I8, U8, BOOL) and shape. Reads the header, then each
// tensor's bytes where the header says, never more than the file's length, which the
// header must account for exactly. Throws InputError naming the file, the tensor and the
// reason: not a regular file, unreadable, a header ParseSafetensorsHeader refuses, a
// dtype torch has no type for (U16, U32, U64, F8_*), a BOOL byte other than 0 or 1, a
// file cut short while read.
StateDict ReadSafetensors(const std::string& path);

// Writes `tensors` (any device; each as a contiguous CPU copy) to `path` atomically,
// in name order, with `metadata` and "format": "pt" (as Transformers writes it, and
// needs to load it) unless `metadata` gives a format. Each name has bytes of its own,
// tensors that share a storage (a tied head) too. It is written a tensor at a time: one
// tensor's CPU copy is in memory at once, not the file. Throws InputError naming the file and the tensor: a dtype the
// format has no name for, or a name it cannot hold ("__metadata__", empty, not UTF-8); and when the write fails.
void WriteSafetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The tensors of the Hugging Face model folder `dir`: its model.safetensors, or, without
// one (as Transformers looks), model.safetensors.index.json and the shards it names.
// Every shard the index names must exist in `dir`, every tensor it maps to a shard must
// be in that shard, and a shard's tensors must be those the index maps to it (a tensor in
// two shards is refused). Throws InputError naming the file, the tensor and the reason.
StateDict ReadHuggingFaceFolder(const std::string& dir);

}  // namespace poplar
