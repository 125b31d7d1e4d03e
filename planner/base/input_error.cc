#include "planner/base/input_error.h"

#include <cstdio>

namespace poplar {
namespace {

constexpr std::size_t kLongestQuoted = 80;
constexpr std::size_t kClippedTo = 60;

// Control characters as \n or \x1b; with `bytes_above_ascii`, bytes from 0x80 too (a
// quoted value may not be UTF-8, which a gRPC string or a JSON document must be).
std::string Escaped(const std::string& text, bool bytes_above_ascii = false) {
  std::string escaped;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      escaped += "\\n";
    } else if (c == '\t') {
      escaped += "\\t";
    } else if (c == '\r') {
      escaped += "\\r";
    } else if (byte < 0x20 || byte == 0x7f || (bytes_above_ascii && byte >= 0x80)) {
      char code[5];
      std::snprintf(code, sizeof code, "\\x%02x", byte);
      escaped += code;
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string Compose(const std::string& file, const std::string& key, const std::string& reason) {
  std::string message = file;
  if (!key.empty()) message += ": " + key;
  // Bytes beyond ASCII too: a value or key from a file may hold U+0085 or U+2028, line
  // breaks to a reader that honours Unicode's, or bytes that are not UTF-8.
  return Escaped(message + ": " + reason, /*bytes_above_ascii=*/true);
}

}  // namespace

std::string AsciiText(const std::string& text) { return Escaped(text, true); }

std::string Printable(const std::string& text) {
  if (text.size() <= kLongestQuoted) return AsciiText(text);
  return AsciiText(text.substr(0, kClippedTo)) + "... (" + std::to_string(text.size()) + " characters)";
}

InputError::InputError(std::string file, std::string key, std::string reason)
    : std::runtime_error(Compose(file, key, reason)),
      file_(std::move(file)),
      key_(std::move(key)),
      reason_(std::move(reason)) {}

}  // namespace poplar
