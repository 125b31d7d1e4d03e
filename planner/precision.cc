#include "planner/precision.h"

#include "planner/input_error.h"

namespace poplar {

std::optional<Precision> ParsePrecision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "mixed" || text == "bf16" || text == "fp16") return Precision::kMixed;
  return std::nullopt;
}

std::string PrecisionName(Precision precision) {
  return precision == Precision::kFp32 ? "fp32" : "mixed";
}

std::string WorkerPrecisionName(Precision precision) { return precision == Precision::kFp32 ? "fp32" : "bf16"; }

Precision ParseWorkerPrecision(const std::string& text, const std::string& key) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "bf16") return Precision::kMixed;
  throw InputError(key, "", "must be fp32 or bf16, got '" + text + "'");
}

}  // namespace poplar
