// The head's client of an agent against agents served in this process on loopback: how
// each way a call can fail reads.
#include "agent/client/agent_client.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

namespace poplar {
namespace {

using ::testing::HasSubstr;

// An agent that answers Describe alone: gRPC answers every other call with UNIMPLEMENTED.
class DescribeOnlyAgent : public v1::Agent::Service {
 public:
  grpc::Status Describe(grpc::ServerContext*, const v1::DescribeRequest*, v1::DescribeResponse* response) override {
    response->set_node("b");
    return grpc::Status::OK;
  }
};

// An agent that refuses every launch it is asked to check, and answers Status slowly.
class RefusingAgent : public v1::Agent::Service {
 public:
  grpc::Status CheckLaunch(grpc::ServerContext*, const v1::LaunchRequest*, v1::CheckLaunchResponse*) override {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "cuda:3 is not a device of this node");
  }
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest*, v1::StatusResponse*) override {
    while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return grpc::Status::CANCELLED;
  }
};

// `service` served on a loopback port of its own while the object lives.
class ServedAgent {
 public:
  explicit ServedAgent(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~ServedAgent() { server_->Shutdown(std::chrono::system_clock::now()); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

AgentClient ClientOf(const std::string& address) {
  return AgentClient("b", address, grpc::InsecureChannelCredentials());
}

// The message of the AgentError that `call` throws; fails the test if it throws none.
template <typename Call>
std::string AgentErrorOf(Call call) {
  try {
    call();
  } catch (const AgentError& error) {
    return error.what();
  }
  ADD_FAILURE() << "no AgentError";
  return "";
}

TEST(AgentClientTest, ACallTheAgentLacksIsAnErrorNamingItsNode) {
  DescribeOnlyAgent service;
  ServedAgent agent(&service);
  AgentClient client = ClientOf(agent.address());
  EXPECT_EQ(client.Describe().node(), "b");
  const std::string error = AgentErrorOf([&] { client.FreePort(); });
  EXPECT_THAT(error, HasSubstr("node 'b'"));
  EXPECT_THAT(error, HasSubstr("the agent at " + agent.address() + " refused FreePort"));
  EXPECT_THAT(AgentErrorOf([&] { client.CheckLaunch(v1::LaunchRequest()); }), HasSubstr("node 'b'"));
}

TEST(AgentClientTest, AnAgentsRefusalOfALaunchIsTheErrorWithItsNodeAndReason) {
  RefusingAgent service;
  ServedAgent agent(&service);
  AgentClient client = ClientOf(agent.address());
  const std::string error = AgentErrorOf([&] { client.CheckLaunch(v1::LaunchRequest()); });
  EXPECT_THAT(error, HasSubstr("node 'b': the agent at " + agent.address() + " refused the launch"));
  EXPECT_THAT(error, HasSubstr("cuda:3 is not a device of this node"));
}

TEST(AgentClientTest, AnAgentThatDoesNotAnswerInTimeIsNamed) {
  RefusingAgent service;
  ServedAgent agent(&service);
  AgentClient client = ClientOf(agent.address());
  const std::string error = AgentErrorOf([&] { client.Status(std::chrono::seconds(1)); });
  EXPECT_THAT(error, HasSubstr("node 'b': the agent at " + agent.address() + " did not answer in time"));
}

TEST(AgentClientTest, AnAgentNotRunningIsUnreachableWithItsAddress) {
  std::string address;
  {
    DescribeOnlyAgent service;
    ServedAgent agent(&service);
    address = agent.address();  // a port free again once the agent is gone
  }
  AgentClient client = ClientOf(address);
  const std::string error = AgentErrorOf([&] { client.Describe(std::chrono::seconds(5)); });
  EXPECT_THAT(error, HasSubstr("node 'b': agent unreachable at " + address + " (is poplar-agent running there?)"));
}

}  // namespace
}  // namespace poplar
