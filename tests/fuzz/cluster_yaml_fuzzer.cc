// The cluster file (planner/cluster/cluster.h), its measured network recorded but not read.
#include "fuzz_parser.h"
#include "planner/cluster/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) {
    poplar::ParseClusterYaml(text, "fuzz.yaml", poplar::ClusterRead::kNetworkElsewhere);
  });
}
