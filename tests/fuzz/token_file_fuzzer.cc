// A token file (planner/formats/token_file.h) for a model of 50257 tokens and 8 positions.
#include "fuzz_parser.h"
#include "planner/formats/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& bytes) { poplar::ParseTokenFile(bytes, "fuzz.bin", 8, 50257); });
}
