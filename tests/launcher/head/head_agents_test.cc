// The head's check that a node runs its own version of poplar: the head, the agents
// and the workers share one protocol and one job contract, so a node on another
// version is refused before anything starts there, naming the node and both versions.
// And its Describe of an agent: one that starts listening a moment late still answers.
#include "launcher/head/head_agents.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

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

// An agent that answers Describe alone, served on loopback at `port` (0: a free one).
class DescribingAgent : public v1::Agent::Service {
 public:
  explicit DescribingAgent(int port = 0) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~DescribingAgent() override { server_->Shutdown(std::chrono::system_clock::now()); }
  int port() const { return port_; }
  grpc::Status Describe(grpc::ServerContext*, const v1::DescribeRequest*, v1::DescribeResponse* response) override {
    response->set_node("b");
    return grpc::Status::OK;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// A loopback port nothing listens on now.
int FreedPort() {
  DescribingAgent agent;
  return agent.port();
}

TEST(DescribeAgent, AnAgentThatStartsListeningAMomentLateAnswers) {
  const int port = FreedPort();
  AgentClient client("b", "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  std::unique_ptr<DescribingAgent> agent;
  std::thread start([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    agent = std::make_unique<DescribingAgent>(port);
  });
  v1::DescribeResponse description;
  EXPECT_NO_THROW(description = DescribeAgent(client, std::chrono::seconds(5)));
  start.join();
  EXPECT_EQ(description.node(), "b");
}

TEST(DescribeAgent, AnAgentThatNeverListensIsUnreachableWithItsAddress) {
  const std::string address = "127.0.0.1:" + std::to_string(FreedPort());
  AgentClient client("b", address, grpc::InsecureChannelCredentials());
  try {
    DescribeAgent(client, std::chrono::seconds(5));
    ADD_FAILURE() << "no AgentError";
  } catch (const AgentError& error) {
    EXPECT_EQ(error.kind(), AgentError::Kind::kUnreachable);
    EXPECT_NE(std::string(error.what()).find("node 'b': agent unreachable at " + address), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace poplar
