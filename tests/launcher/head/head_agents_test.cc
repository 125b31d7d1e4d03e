// The head's check that a node runs its own version of poplar: the head, the agents
// and the workers share one protocol and one job contract, so a node on another
// version is refused before anything starts there, naming the node and both versions.
#include "launcher/head/head_agents.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/base/command_failed.h"

namespace poplar {
namespace {

v1::DescribeResponse Described(const std::string& agent, const std::string& worker) {
  v1::DescribeResponse description;
  description.set_agent_version(agent);
  description.set_worker_version(worker);
  return description;
}

std::string Refusal(const v1::DescribeResponse& description) {
  try {
    CheckVersion("b", description);
  } catch (const CommandFailed& error) {
    return error.what();
  }
  return "";
}

TEST(CheckVersion, ANodeOfTheHeadsVersionPasses) {
  EXPECT_NO_THROW(CheckVersion(
      "b", Described("poplar-agent " POPLAR_VERSION, "poplar-worker " POPLAR_VERSION " (libtorch 1.13.1, CPU)")));
}

TEST(CheckVersion, ANodeOfAnotherVersionIsRefusedNamingItAndBothVersions) {
  const std::string old_agent = Refusal(Described("poplar-agent 0.0.9", "poplar-worker " POPLAR_VERSION " (x)"));
  EXPECT_NE(old_agent.find("node 'b'"), std::string::npos) << old_agent;
  EXPECT_NE(old_agent.find("'poplar-agent 0.0.9'"), std::string::npos) << old_agent;
  EXPECT_NE(old_agent.find("this head is poplar " POPLAR_VERSION), std::string::npos) << old_agent;
  // A worker of another version beside an agent of this one; a version that only
  // begins like this one's; and an agent that says nothing.
  EXPECT_NE(Refusal(Described("poplar-agent " POPLAR_VERSION, "poplar-worker 0.0.9 (x)")), "");
  EXPECT_NE(Refusal(Described("poplar-agent " POPLAR_VERSION "1", "poplar-worker " POPLAR_VERSION "1 (x)")), "");
  const std::string silent = Refusal(Described("", ""));
  EXPECT_NE(silent.find("reports (no version given) and worker (no version given)"), std::string::npos) << silent;
}

}  // namespace
}  // namespace poplar
