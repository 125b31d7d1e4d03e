// A network file and a worker's measurement line (planner/formats/network.h).
#include "fuzz_parser.h"
#include "planner/formats/network.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) {
    try {
      poplar::ParseNetworkJson(text, "fuzz.json");
    } catch (const poplar::InputError&) {
    }
    poplar::ParseMeasurementLine(text, "rank 0");
  });
}
