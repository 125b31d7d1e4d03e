// AgentClient: the head node's connection to one node's poplar-agent.
//
// Every failure becomes an AgentError whose message names the node, its agent's
// address and the reason in words ("unreachable", "refused our credentials", the
// agent's own refusal), so `poplar` can print it as the one line of an error.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "poplar/v1/agent.grpc.pb.h"

namespace poplar {

// what(): "node 'b': <reason>".
class AgentError : public std::runtime_error {
 public:
  enum class Kind {
    kOther,
    kLostAgent,     // a launch stream broke after events had arrived: the agent went away
    kTlsHandshake,  // the agent answered but the TLS handshake failed: another CA's
                    // certificate on one side, or the agent refused ours
    kUnreachable,   // no connection was made: nothing listens there (yet), or the
                    // connection attempt failed on the way; asking again may answer
    kNoAnswer,      // the call's deadline passed first
  };
  AgentError(const std::string& node, std::string reason, Kind kind = Kind::kOther)
      : std::runtime_error("node '" + node + "': " + reason), reason_(std::move(reason)), kind_(kind) {}
  const std::string& reason() const { return reason_; }
  Kind kind() const { return kind_; }

 private:
  std::string reason_;
  Kind kind_;
};

// Ends streaming calls early from another thread. Cancel() reaches the calls under way
// and every later one (which then ends at once); one canceller may serve several calls,
// on several agents, at the same time.
class CallCanceller {
 public:
  void Cancel();

  // A call's context, registered with `canceller` (which may be null) while the call
  // lasts. `refused()`: the canceller was cancelled already; do not start the call.
  class Scope {
   public:
    Scope(CallCanceller* canceller, grpc::ClientContext* context);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    bool refused() const { return refused_; }

   private:
    CallCanceller* canceller_;
    grpc::ClientContext* context_;
    bool refused_ = false;
  };

 private:
  std::mutex mutex_;
  bool cancelled_ = false;
  std::vector<grpc::ClientContext*> contexts_;
};

class AgentClient {
 public:
  AgentClient(std::string node, std::string address, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

  const std::string& node() const { return node_; }
  const std::string& address() const { return address_; }

  // `wait_for_ready`: an agent not reachable yet is waited for until `deadline` (the call
  // then fails kNoAnswer); otherwise the call fails at once, kUnreachable.
  v1::DescribeResponse Describe(std::chrono::seconds deadline = std::chrono::seconds(10), bool wait_for_ready = false);
  v1::StatusResponse Status(std::chrono::seconds deadline = std::chrono::seconds(10));
  // A port free on the agent's node now (the rendezvous of a job whose rank 0 runs there).
  int FreePort();
  // True if the job was running there.
  // `launch_id` (optional): stop the job only if that launch started it.
  bool Stop(const std::string& job_id, const std::string& reason, const std::string& launch_id = "");
  // Hands job `job_id`'s rank 0 (which runs on this node) a plan that replaces its plan
  // between steps; returns the plan's number. Throws AgentError with the agent's refusal.
  int SwitchPlan(const std::string& job_id, const std::string& plan_json, const std::string& reason);
  // The agent's checks of a launch, with nothing started. Throws AgentError with the
  // agent's refusal.
  void CheckLaunch(const v1::LaunchRequest& request);
  // Streams progress to `on_progress`; returns the profile file's text. `canceller`
  // (optional) ends it early: the agent stops the measurement and this throws.
  std::string Profile(const v1::ProfileRequest& request,
                      const std::function<void(const v1::ProfileProgress&)>& on_progress,
                      CallCanceller* canceller = nullptr);
  // Streams the job's events to `on_event` until the job ends there; throws AgentError
  // if the stream breaks first. `canceller` (optional) ends it early and quietly: the
  // agent stops the job when its stream breaks.
  void Launch(const v1::LaunchRequest& request, const std::function<void(const v1::LaunchEvent&)>& on_event,
              CallCanceller* canceller = nullptr);

 private:
  AgentError Failure(const grpc::Status& status, const std::string& what) const;

  const std::string node_;
  const std::string address_;
  std::unique_ptr<v1::Agent::Stub> stub_;
};

}  // namespace poplar
