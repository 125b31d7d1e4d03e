// The gRPC Agent service (proto/poplar/v1/agent.proto). Thin: it converts messages to
// the plain types of agent/ and back, and maps errors to status codes:
//   InputError -> INVALID_ARGUMENT, DeviceUnavailable -> FAILED_PRECONDITION,
//   anything else -> INTERNAL; each with a message a user can act on.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "agent/agent_config.h"
#include "agent/job.h"
#include "agent/profiler.h"
#include "planner/base/spawner.h"
#include "planner/formats/job_settings.h"
#include "poplar/v1/agent.grpc.pb.h"

namespace poplar {

class AgentService final : public v1::Agent::Service {
 public:
  AgentService(AgentConfig config, std::string worker_version);
  ~AgentService() override;  // stops every running job and waits for its ranks

  grpc::Status Describe(grpc::ServerContext* context, const v1::DescribeRequest* request,
                        v1::DescribeResponse* response) override;
  grpc::Status Profile(grpc::ServerContext* context, const v1::ProfileRequest* request,
                       grpc::ServerWriter<v1::ProfileProgress>* writer) override;
  grpc::Status Launch(grpc::ServerContext* context, const v1::LaunchRequest* request,
                      grpc::ServerWriter<v1::LaunchEvent>* writer) override;
  grpc::Status CheckLaunch(grpc::ServerContext* context, const v1::LaunchRequest* request,
                           v1::CheckLaunchResponse* response) override;
  grpc::Status SwitchPlan(grpc::ServerContext* context, const v1::SwitchPlanRequest* request,
                          v1::SwitchPlanResponse* response) override;
  grpc::Status Stop(grpc::ServerContext* context, const v1::StopRequest* request, v1::StopResponse* response) override;
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status FreePort(grpc::ServerContext* context, const v1::FreePortRequest* request,
                        v1::FreePortResponse* response) override;

  // The agent's devices and its running jobs' latest step records, in Prometheus' text
  // format (agent/prometheus.h): what GET /metrics answers. Safe from any thread.
  std::string MetricsText();

  // Stops every job (the agent is shutting down). Returns the longest stop grace among
  // them (zero when none runs): how long their ranks may still take to end.
  std::chrono::milliseconds StopAll(const std::string& reason);

 private:
  const AgentConfig config_;
  const std::string worker_version_;
  Spawner spawner_;
  Profiler profiler_;
  // Marks `keys` as held by `holder` until the returned guard goes (under mutex_).
  std::shared_ptr<void> Hold(const std::vector<std::string>& keys, const std::string& holder);
  // Throws InputError if job `job_id` runs here (under mutex_).
  void RequireNotRunning(const std::string& job_id) const;

  std::mutex mutex_;
  struct RunningJob {
    std::shared_ptr<Job> job;
    std::string launch_id;                      // the launch that started it (LaunchRequest.launch_id)
    bool train = false;                         // a training job (not a network one): it takes plan switches
    int plan_switches = 0;                      // plans handed to it (SwitchPlan), numbered from 1
    JobSettings settings;                       // as launched (the adaptive batch's bounds hold its switches)
    std::map<int, std::string> latest_metrics;  // local rank -> its last metrics record
  };
  std::map<std::string, RunningJob> jobs_;  // by job id
  DeviceHolders busy_;                      // devices in use by a job or a profile
};

}  // namespace poplar
