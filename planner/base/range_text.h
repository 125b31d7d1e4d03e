// How a refusal of a whole number out of its range reads, wherever it is read from (a
// YAML or JSON file, a request's text).
#pragma once

#include <cstdint>
#include <string>

namespace poplar {

// "must be <what> from <low> to <high>"; the caller adds what it got.
inline std::string WholeNumberRangeReason(const std::string& what, std::int64_t low, std::int64_t high) {
  return "must be " + what + " from " + std::to_string(low) + " to " + std::to_string(high);
}

}  // namespace poplar
