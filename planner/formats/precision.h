// Training precision as the memory and communication models see it.
#pragma once

#include <optional>
#include <string>

namespace poplar {

enum class Precision {
  kFp32,   // fp32 parameters and gradients, fp32 Adam state: 4 + 4 + 8 bytes/parameter
  kMixed,  // 16-bit parameters and gradients, fp32 master copy and Adam state: 2 + 2 + 12
};

// "fp32" or "mixed" (also accepted: "bf16", "fp16", both meaning kMixed).
std::optional<Precision> ParsePrecision(const std::string& text);
std::string PrecisionName(Precision precision);

// The worker's names of the precisions (poplar-worker --precision, the agents'
// requests): "fp32", and "bf16" for mixed precision; "fp16" is mixed precision too, in
// fp16 with dynamic loss scaling (for devices without bf16).
std::string WorkerPrecisionName(Precision precision);
// A worker precision name ("fp32", "bf16" or "fp16"); nullopt for anything else.
std::optional<Precision> WorkerPrecisionNamed(const std::string& text);
// The same, where anything else is an InputError naming `key`.
Precision ParseWorkerPrecision(const std::string& text, const std::string& key);

// Bytes of one parameter (and of one gradient) as computed on and communicated.
inline int BytesPerWorkingValue(Precision precision) { return precision == Precision::kFp32 ? 4 : 2; }

}  // namespace poplar
