// A profile file (planner/formats/profile.h).
#include "fuzz_parser.h"
#include "planner/formats/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) { poplar::ParseProfileJson(text, "fuzz.json"); });
}
