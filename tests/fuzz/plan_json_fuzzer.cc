// A plan file as the worker reads it (planner/formats/worker_plan.h).
#include "fuzz_parser.h"
#include "planner/formats/worker_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) { poplar::ParseWorkerPlan(text, "fuzz.json"); });
}
