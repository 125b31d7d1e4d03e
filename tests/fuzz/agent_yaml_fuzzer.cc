// The agent file (agent/agent_config.h), parsed without making its folders.
#include "agent/agent_config.h"
#include "fuzz_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return FuzzParser(data, size, [](const std::string& text) {
    poplar::ParseAgentConfig(text, "/fuzz/agent.yaml", "/bin/true", poplar::AgentFolders::kLeave);
  });
}
