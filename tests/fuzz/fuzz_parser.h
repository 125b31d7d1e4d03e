// The body of every fuzz target here: the parser gets the fuzzer's bytes as a file's
// text. InputError is its answer to bad input, as the contract asks; anything else that
// escapes (an internal error), a crash, a hang or a sanitizer's report is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/base/input_error.h"

template <typename Parse>
int FuzzParser(const std::uint8_t* data, std::size_t size, Parse parse) {
  try {
    parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const poplar::InputError&) {
  }
  return 0;
}
