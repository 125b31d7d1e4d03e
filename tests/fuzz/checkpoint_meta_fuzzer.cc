// A checkpoint's meta.json (planner/formats/checkpoint_meta.h).
#include "fuzz_parser.h"
#include "planner/formats/checkpoint_meta.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) { poplar::ParseCheckpointMeta(text, "meta.json"); });
}
