// Numbers as text that reads back exactly: what one program writes for another (a
// command line, a request) loses no bit on the way.
#pragma once

#include <charconv>
#include <string>

namespace poplar {

// The shortest decimal text that reads back as exactly `value` ("0.1", "3e-05", "1e+38").
inline std::string ShortestText(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

}  // namespace poplar
