// Hugging Face's files (planner/formats/safetensors.h, hf_config.h), each from the fuzzer's bytes: a
// safetensors file as poplar-worker reads one (the header's length from the first 8
// bytes, then the header, for a file of these bytes), a model.safetensors.index.json and
// a config.json.
#include "fuzz_parser.h"
#include "planner/formats/hf_config.h"
#include "planner/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzParser(data, size, [](const std::string& bytes) {
    const std::uint64_t header = poplar::SafetensorsHeaderSize(bytes.substr(0, 8), bytes.size(), "fuzz.safetensors");
    poplar::ParseSafetensorsHeader(bytes.substr(8, header), bytes.size(), "fuzz.safetensors");
  });
  FuzzParser(data, size, [](const std::string& text) { poplar::ParseSafetensorsIndex(text, "fuzz.index.json"); });
  return FuzzParser(data, size, [](const std::string& text) { poplar::ModelConfigFromHuggingFace(text, "fuzz.json"); });
}
