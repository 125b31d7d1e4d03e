#include "planner/formats/precision.h"

#include "planner/base/input_error.h"

namespace poplar {

std::optional<Precision> ParsePrecision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "mixed" || text == "bf16" || text == "fp16") return Precision::kMixed;
  return std::nullopt;
}

std::string PrecisionName(Precision precision) { return precision == Precision::kFp32 ? "fp32" : "mixed"; }

std::string WorkerPrecisionName(Precision precision) { return precision == Precision::kFp32 ? "fp32" : "bf16"; }

std::optional<Precision> WorkerPrecisionNamed(const std::string& text) {
  if (text == "fp16") return Precision::kMixed;
  for (Precision precision : {Precision::kFp32, Precision::kMixed}) {
    if (text == WorkerPrecisionName(precision)) return precision;
  }
  return std::nullopt;
}

Precision ParseWorkerPrecision(const std::string& text, const std::string& key) {
  if (auto precision = WorkerPrecisionNamed(text)) return *precision;
  throw InputError(key, "", "must be fp32, bf16 or fp16, got '" + text + "'");
}

}  // namespace poplar
