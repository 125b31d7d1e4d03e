#include "planner/precision.h"

namespace poplar {

std::optional<Precision> ParsePrecision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "mixed" || text == "bf16" || text == "fp16") return Precision::kMixed;
  return std::nullopt;
}

std::string PrecisionName(Precision precision) {
  return precision == Precision::kFp32 ? "fp32" : "mixed";
}

}  // namespace poplar
