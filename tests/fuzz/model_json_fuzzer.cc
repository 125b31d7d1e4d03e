// A model configuration (planner/formats/model_config.h).
#include "fuzz_parser.h"
#include "planner/formats/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) { poplar::ParseModelConfig(text, "fuzz.json"); });
}
