#include "agent/client/agent_client.h"

#include <algorithm>
#include <cctype>

#include "agent/rpc/keepalive.h"

namespace poplar {
namespace {

void SetDeadline(grpc::ClientContext& context, std::chrono::seconds deadline) {
  context.set_deadline(std::chrono::system_clock::now() + deadline);
}

}  // namespace

void CallCanceller::Cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  for (grpc::ClientContext* context : contexts_) context->TryCancel();
}

CallCanceller::Scope::Scope(CallCanceller* canceller, grpc::ClientContext* context)
    : canceller_(canceller), context_(context) {
  if (canceller_ == nullptr) return;
  std::lock_guard<std::mutex> lock(canceller_->mutex_);
  refused_ = canceller_->cancelled_;
  if (!refused_) canceller_->contexts_.push_back(context_);
}

CallCanceller::Scope::~Scope() {
  if (canceller_ == nullptr || refused_) return;
  std::lock_guard<std::mutex> lock(canceller_->mutex_);
  auto& contexts = canceller_->contexts_;
  contexts.erase(std::remove(contexts.begin(), contexts.end(), context_), contexts.end());
}

AgentClient::AgentClient(std::string node, std::string address,
                         const std::shared_ptr<grpc::ChannelCredentials>& credentials)
    : node_(std::move(node)),
      address_(std::move(address)),
      stub_(v1::Agent::NewStub(grpc::CreateCustomChannel(address_, credentials, HeadChannelArguments()))) {}

AgentError AgentClient::Failure(const grpc::Status& status, const std::string& what) const {
  std::string reason;
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE: {
      const std::string& message = status.error_message();
      std::string lower = message;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      const auto handshake = lower.find("handshake failed");
      if (handshake != std::string::npos) {
        // Something answered with TLS, but its certificate is not signed by our CA (or
        // ours by its): another CA's agent, or another TLS service on that port.
        return AgentError(node_,
                          "the TLS handshake with the agent at " + address_ +
                              " failed: are its certificate and the "
                              "cluster's credentials from one CA (scripts/make-cluster-credentials)? gRPC: " +
                              message.substr(handshake),
                          AgentError::Kind::kTlsHandshake);
      }
      // Its certificate is the CA's but names other hosts: another node's certificate
      // (each node's names the hosts it is dialled at), or an agent posing as this node.
      if (lower.find("hostname verification check failed") != std::string::npos ||
          lower.find("is not in peer certificate") != std::string::npos) {
        const std::string host = address_.substr(0, address_.rfind(':'));
        return AgentError(node_,
                          "the agent at " + address_ + " serves a certificate that does not name " + host +
                              ": is it node '" + node_ +
                              "'s (its nodes/NAME.pem from scripts/make-cluster-credentials names the hosts it is "
                              "dialled at)? gRPC: " +
                              message,
                          AgentError::Kind::kTlsHandshake);
      }
      // The connection was made and then closed before any call (under TLS 1.3 an agent
      // checks the head's certificate after the head has finished its side): the agent
      // refused our certificate. Not "unreachable": something listens there.
      if (lower.find("failed to connect") != std::string::npos &&
          (lower.find("socket closed") != std::string::npos || lower.find("reset by peer") != std::string::npos)) {
        return AgentError(
            node_,
            "the agent at " + address_ +
                " closed the connection during the TLS handshake: it "
                "refused the head's certificate (is credentials.cert signed by the cluster's CA, and still "
                "valid?), or what listens there is not a poplar-agent. gRPC: " +
                message,
            AgentError::Kind::kTlsHandshake);
      }
      return AgentError(node_, "agent unreachable at " + address_ + " (is poplar-agent running there?): " + message,
                        AgentError::Kind::kUnreachable);
    }
    case grpc::StatusCode::UNAUTHENTICATED:
      reason = "the agent at " + address_ + " refused our credentials: " + status.error_message();
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return AgentError(node_, "the agent at " + address_ + " did not answer in time", AgentError::Kind::kNoAnswer);
    case grpc::StatusCode::CANCELLED:
      reason = what + " was cancelled";
      break;
    default:
      reason = "the agent at " + address_ + " refused " + what + ": " + status.error_message();
  }
  return AgentError(node_, reason);
}

v1::DescribeResponse AgentClient::Describe(std::chrono::seconds deadline, bool wait_for_ready) {
  grpc::ClientContext context;
  SetDeadline(context, deadline);
  context.set_wait_for_ready(wait_for_ready);
  v1::DescribeResponse response;
  const grpc::Status status = stub_->Describe(&context, v1::DescribeRequest(), &response);
  if (!status.ok()) throw Failure(status, "Describe");
  return response;
}

v1::StatusResponse AgentClient::Status(std::chrono::seconds deadline) {
  grpc::ClientContext context;
  SetDeadline(context, deadline);
  v1::StatusResponse response;
  const grpc::Status status = stub_->Status(&context, v1::StatusRequest(), &response);
  if (!status.ok()) throw Failure(status, "Status");
  return response;
}

int AgentClient::FreePort() {
  grpc::ClientContext context;
  SetDeadline(context, std::chrono::seconds(10));
  v1::FreePortResponse response;
  const grpc::Status status = stub_->FreePort(&context, v1::FreePortRequest(), &response);
  if (!status.ok()) throw Failure(status, "FreePort");
  return response.port();
}

bool AgentClient::Stop(const std::string& job_id, const std::string& reason, const std::string& launch_id) {
  grpc::ClientContext context;
  SetDeadline(context, std::chrono::seconds(10));
  v1::StopRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  request.set_launch_id(launch_id);
  v1::StopResponse response;
  const grpc::Status status = stub_->Stop(&context, request, &response);
  if (!status.ok()) throw Failure(status, "Stop");
  return response.stopped();
}

int AgentClient::SwitchPlan(const std::string& job_id, const std::string& plan_json, const std::string& reason) {
  grpc::ClientContext context;
  SetDeadline(context, std::chrono::seconds(10));
  v1::SwitchPlanRequest request;
  request.set_job_id(job_id);
  request.set_plan_json(plan_json);
  request.set_reason(reason);
  v1::SwitchPlanResponse response;
  const grpc::Status status = stub_->SwitchPlan(&context, request, &response);
  if (!status.ok()) throw Failure(status, "the plan switch");
  return response.number();
}

void AgentClient::CheckLaunch(const v1::LaunchRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context, std::chrono::seconds(30));  // it lists the node's devices (NVML)
  v1::CheckLaunchResponse response;
  const grpc::Status status = stub_->CheckLaunch(&context, request, &response);
  if (!status.ok()) throw Failure(status, "the launch");
}

std::string AgentClient::Profile(const v1::ProfileRequest& request,
                                 const std::function<void(const v1::ProfileProgress&)>& on_progress,
                                 CallCanceller* canceller) {
  grpc::ClientContext context;
  const CallCanceller::Scope scope(canceller, &context);
  if (scope.refused()) throw AgentError(node_, "profiling " + request.device_type() + " was cancelled");
  auto reader = stub_->Profile(&context, request);
  v1::ProfileProgress progress;
  std::string profile;
  while (reader->Read(&progress)) {
    on_progress(progress);
    if (!progress.profile_json().empty()) profile = progress.profile_json();
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) throw Failure(status, "profiling " + request.device_type());
  if (profile.empty()) throw AgentError(node_, "the agent sent no profile");
  return profile;
}

void AgentClient::Launch(const v1::LaunchRequest& request, const std::function<void(const v1::LaunchEvent&)>& on_event,
                         CallCanceller* canceller) {
  grpc::ClientContext context;
  const CallCanceller::Scope scope(canceller, &context);
  if (scope.refused()) return;
  auto reader = stub_->Launch(&context, request);
  v1::LaunchEvent event;
  bool ended = false;
  bool any_event = false;
  while (reader->Read(&event)) {
    any_event = true;
    on_event(event);
    ended = ended || event.kind() == v1::LaunchEvent::JOB_FINISHED || event.kind() == v1::LaunchEvent::JOB_FAILED;
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok() && ended) return;  // the job's end arrived: nothing is lost
  // Events arrived, so the connection and credentials worked: the agent went away.
  if (!status.ok() && any_event && status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    throw AgentError(node_,
                     "lost its agent at " + address_ +
                         " during the job (did poplar-agent stop, or its node go down?): " + status.error_message(),
                     AgentError::Kind::kLostAgent);
  }
  if (!status.ok()) throw Failure(status, "the launch");
  if (!ended) throw AgentError(node_, "the launch stream ended before the job did");
}

}  // namespace poplar
