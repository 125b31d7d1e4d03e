// A token file (planner/formats/token_file.h) for a model of 50257 tokens and 8
// positions, and for one of 2^24 tokens (Llama-3-class, past uint16), so that ids of a
// uint32 file after a header get through to the checks behind it. The seed corpus has
// a headerless uint16 file and uint16 and uint32 files with a header.
#include "fuzz_parser.h"
#include "planner/formats/token_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzParser(data, size, [](const std::string& bytes) { poplar::ParseTokenFile(bytes, "fuzz.bin", 8, 50257); });
  return FuzzParser(data, size,
                    [](const std::string& bytes) { poplar::ParseTokenFile(bytes, "fuzz.bin", 8, 1 << 24); });
}
