#include "agent/agent_service.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/devices.h"
#include "agent/node_job.h"
#include "agent/prometheus.h"
#include "agent/worker_settings.h"
#include "planner/base/free_port.h"
#include "planner/base/input_error.h"

namespace poplar {
namespace {

// Runs `body`, turning the agent's exceptions into a status (see agent_service.h).
template <typename Body>
grpc::Status Guarded(const char* rpc, Body&& body) {
  try {
    return body();
  } catch (const InputError& error) {
    std::fprintf(stderr, "poplar-agent: %s refused: %s\n", rpc, error.what());
    return {grpc::StatusCode::INVALID_ARGUMENT, error.what()};
  } catch (const DeviceUnavailable& error) {
    std::fprintf(stderr, "poplar-agent: %s refused: %s\n", rpc, error.what());
    return {grpc::StatusCode::FAILED_PRECONDITION, error.what()};
  } catch (const std::exception& error) {
    std::fprintf(stderr, "poplar-agent: %s failed: %s\n", rpc, error.what());
    return {grpc::StatusCode::INTERNAL, error.what()};
  }
}

v1::LaunchEvent::Kind KindOf(JobEvent::Kind kind) {
  switch (kind) {
    case JobEvent::Kind::kStarted:
      return v1::LaunchEvent::STARTED;
    case JobEvent::Kind::kOutput:
      return v1::LaunchEvent::OUTPUT;
    case JobEvent::Kind::kMetrics:
      return v1::LaunchEvent::METRICS;
    case JobEvent::Kind::kExited:
      return v1::LaunchEvent::EXITED;
    case JobEvent::Kind::kFinished:
      return v1::LaunchEvent::JOB_FINISHED;
    case JobEvent::Kind::kFailed:
      return v1::LaunchEvent::JOB_FAILED;
    case JobEvent::Kind::kPlanSwitch:
      return v1::LaunchEvent::PLAN_SWITCH;
  }
  return v1::LaunchEvent::KIND_UNSPECIFIED;
}

// A Launch or CheckLaunch request as the plain settings of node_job.h.
LaunchSettings SettingsOf(const v1::LaunchRequest& request) {
  LaunchSettings settings;
  settings.job_id = request.job_id();
  settings.node = request.node();
  settings.plan_json = request.plan_json();
  settings.model_config_json = request.model_config_json();
  settings.master_addr = request.master_addr();
  settings.master_port = request.master_port();
  settings.precision = PrecisionOrDefault(request.precision());
  settings.job_settings = {request.settings().begin(), request.settings().end()};
  settings.trace_step = request.trace_step();
  settings.timeout_s = request.timeout_s();
  settings.resume = request.resume() || request.require_checkpoint();
  settings.require_checkpoint = request.require_checkpoint();
  switch (request.kind()) {
    case v1::LaunchRequest::TRAIN:
      settings.kind = LaunchSettings::Kind::kTrain;
      break;
    case v1::LaunchRequest::NETWORK:
      settings.kind = LaunchSettings::Kind::kNetwork;
      break;
    default:  // a newer head's kind
      throw InputError("kind", "", std::to_string(request.kind()) + " is not a kind this agent runs (TRAIN, NETWORK)");
  }
  settings.network_max_bytes = request.network_max_bytes();
  return settings;
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

AgentService::AgentService(AgentConfig config, std::string worker_version)
    : config_(std::move(config)),
      worker_version_(std::move(worker_version)),
      profiler_(config_, worker_version_, spawner_) {}

AgentService::~AgentService() { StopAll("the agent is shutting down"); }

std::chrono::milliseconds AgentService::StopAll(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::chrono::milliseconds longest{0};
  for (auto& [id, running] : jobs_) {
    running.job->Stop(reason);
    longest = std::max(longest, running.job->stop_grace());
  }
  return longest;
}

grpc::Status AgentService::Describe(grpc::ServerContext*, const v1::DescribeRequest*, v1::DescribeResponse* response) {
  return Guarded("Describe", [&] {
    response->set_node(HostName());
    response->set_agent_version("poplar-agent " POPLAR_VERSION);
    response->set_worker_version(worker_version_);
    for (const auto& device : ListDevices(config_)) {
      v1::Device* out = response->add_devices();
      out->set_type(device.type);
      out->set_index(device.index);
      out->set_memory_bytes(device.memory_bytes);
      out->set_compute_capability(device.compute_capability);
      out->set_emulated(device.emulated);
    }
    return grpc::Status::OK;
  });
}

grpc::Status AgentService::Profile(grpc::ServerContext* context, const v1::ProfileRequest* request,
                                   grpc::ServerWriter<v1::ProfileProgress>* writer) {
  return Guarded("Profile", [&] {
    ProfileSettings settings;
    settings.model_config_json = request->model_config_json();
    settings.device_type = request->device_type();
    settings.stages.assign(request->stages().begin(), request->stages().end());
    settings.precision = PrecisionOrDefault(request->precision());
    settings.repeats = request->repeats();
    settings.largest_micro_batch = request->largest_micro_batch();
    const auto devices = ListDevices(config_);
    const DeviceInfo device = DeviceOfType(devices, settings.device_type);
    // Measuring needs a device no job uses, held until the profile is done; a profile
    // read from the cache needs none.
    std::shared_ptr<void> held;
    auto claim = [&] {
      std::lock_guard<std::mutex> lock(mutex_);
      const DeviceInfo free = FindDevice(devices, settings.device_type, busy_);
      held = Hold({DeviceKey(free)}, "a profile");
      return free;
    };
    std::fprintf(stderr, "poplar-agent: profiling %s for %s\n", device.type.c_str(), context->peer().c_str());
    const auto progress = [&](const std::string& line, bool cached) {
      if (context->IsCancelled()) return false;
      if (line.empty()) return true;
      v1::ProfileProgress message;
      message.set_line(line);
      message.set_cached(cached);
      return writer->Write(message);
    };
    const std::string profile = profiler_.Run(settings, device, progress, claim);
    v1::ProfileProgress last;
    last.set_line("profile of " + device.type + " done");
    last.set_profile_json(profile);
    writer->Write(last);
    return grpc::Status::OK;
  });
}

grpc::Status AgentService::Launch(grpc::ServerContext* context, const v1::LaunchRequest* request,
                                  grpc::ServerWriter<v1::LaunchEvent>* writer) {
  return Guarded("Launch", [&] {
    const LaunchSettings settings = SettingsOf(*request);
    const auto devices = ListDevices(config_);  // NVML: outside the lock
    std::shared_ptr<Job> job;
    std::shared_ptr<void> held;  // the job's devices, until it has ended
    {
      std::lock_guard<std::mutex> lock(mutex_);
      RequireNotRunning(settings.job_id);
      // Checks the job id, the paths and the plan, and picks free devices; writes
      // jobs/<id>/ (hence under the lock).
      job = std::make_shared<Job>(settings.job_id, PrepareNodeJob(config_, devices, settings, busy_),
                                  StopGrace(settings));
      jobs_[settings.job_id] = {job,
                                request->launch_id(),
                                settings.kind == LaunchSettings::Kind::kTrain,
                                0,
                                ParseJobSettings(settings.job_settings, "settings"),
                                {}};
      held = Hold(job->devices(), "job '" + settings.job_id + "'");
    }
    std::fprintf(stderr, "poplar-agent: job %s: starting %zu rank(s) for %s\n", settings.job_id.c_str(),
                 job->ranks().size(), context->peer().c_str());
    job->Start(spawner_);
    bool caller_gone = false;
    JobEvent event;
    for (;;) {
      if (!job->Next(&event, std::chrono::milliseconds(200))) {
        if (!caller_gone && context->IsCancelled()) {
          caller_gone = true;
          job->Stop("the head node went away (its launch stream was cancelled)");
        }
        continue;
      }
      if (event.kind == JobEvent::Kind::kMetrics) {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.at(settings.job_id).latest_metrics[event.rank] = event.text;
      }
      v1::LaunchEvent out;
      out.set_kind(KindOf(event.kind));
      out.set_rank(event.rank);
      out.set_text(event.text);
      out.set_exit_code(event.exit_code);
      if (!caller_gone && !writer->Write(out)) {
        caller_gone = true;
        job->Stop("the head node went away (its launch stream broke)");
      }
      if (event.kind == JobEvent::Kind::kFinished || event.kind == JobEvent::Kind::kFailed) {
        std::fprintf(stderr, "poplar-agent: job %s: %s\n", settings.job_id.c_str(), event.text.c_str());
        // A network job's measurements reached the head; a failed one keeps its logs, as
        // does one whose head went away (its measurements live only in the folder).
        if (event.kind == JobEvent::Kind::kFinished && settings.kind == LaunchSettings::Kind::kNetwork &&
            !caller_gone) {
          RemoveJobFolder(config_, settings.job_id);
        }
        break;
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.erase(settings.job_id);
    return grpc::Status::OK;
  });
}

grpc::Status AgentService::CheckLaunch(grpc::ServerContext*, const v1::LaunchRequest* request,
                                       v1::CheckLaunchResponse* response) {
  return Guarded("CheckLaunch", [&] {
    const LaunchSettings settings = SettingsOf(*request);
    const auto devices = ListDevices(config_);  // NVML: outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    RequireNotRunning(settings.job_id);
    for (const RankProcess& process : CheckNodeJob(config_, devices, settings, busy_)) {
      response->add_devices(process.device);
    }
    return grpc::Status::OK;
  });
}

void AgentService::RequireNotRunning(const std::string& job_id) const {
  if (jobs_.count(job_id)) throw InputError("job_id", "", "job '" + job_id + "' is already running on this node");
}

std::shared_ptr<void> AgentService::Hold(const std::vector<std::string>& keys, const std::string& holder) {
  for (const std::string& key : keys) busy_[key] = holder;
  return std::shared_ptr<void>(nullptr, [this, keys](void*) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& key : keys) busy_.erase(key);
  });
}

grpc::Status AgentService::SwitchPlan(grpc::ServerContext*, const v1::SwitchPlanRequest* request,
                                      v1::SwitchPlanResponse* response) {
  return Guarded("SwitchPlan", [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = jobs_.find(request->job_id());
    if (found == jobs_.end() || !found->second.train) {
      throw InputError("job_id", "", "no training job '" + request->job_id() + "' runs on this node");
    }
    RunningJob& running = found->second;
    const std::vector<int> ranks = running.job->ranks();
    if (std::find(ranks.begin(), ranks.end(), 0) == ranks.end()) {
      throw InputError("job_id", "",
                       "rank 0 of job '" + request->job_id() + "' runs on another node: a plan goes to rank 0's node");
    }
    const int number = running.plan_switches + 1;
    const std::string announced =
        WritePlanSwitch(config_, request->job_id(), request->plan_json(), number, request->reason(), running.settings);
    running.plan_switches = number;
    running.job->Announce({JobEvent::Kind::kPlanSwitch, -1, announced, 0});
    std::fprintf(stderr, "poplar-agent: job %s: plan %d handed to rank 0: %s\n", request->job_id().c_str(), number,
                 request->reason().c_str());
    response->set_number(number);
    return grpc::Status::OK;
  });
}

std::string AgentService::MetricsText() {
  const std::vector<DeviceInfo> devices = ListDevices(config_);  // NVML: outside the lock
  std::vector<DeviceState> states;
  std::vector<RankState> ranks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<std::string, std::string> job_of;  // device key -> the job holding it
    for (const auto& [id, running] : jobs_) {
      for (const std::string& device : running.job->devices()) job_of[device] = id;
      for (const auto& [rank, text] : running.latest_metrics) {
        ranks.push_back({id, rank, nlohmann::json::parse(text, nullptr, false)});
      }
    }
    for (const DeviceInfo& device : devices) {
      const std::string key = DeviceKey(device);
      const auto job = job_of.find(key);
      states.push_back(
          {key, device.type, device.memory_bytes, busy_.count(key) > 0, job == job_of.end() ? "" : job->second});
    }
  }
  return PrometheusText(HostName(), states, ranks);
}

grpc::Status AgentService::Stop(grpc::ServerContext*, const v1::StopRequest* request, v1::StopResponse* response) {
  return Guarded("Stop", [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = jobs_.find(request->job_id());
    // A launch id given must be the job's: another launch's job of the same id stays.
    const bool ours =
        found != jobs_.end() && (request->launch_id().empty() || found->second.launch_id == request->launch_id());
    response->set_stopped(ours);
    if (ours) found->second.job->Stop(request->reason().empty() ? "stopped by the head node" : request->reason());
    return grpc::Status::OK;
  });
}

grpc::Status AgentService::Status(grpc::ServerContext*, const v1::StatusRequest*, v1::StatusResponse* response) {
  return Guarded("Status", [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, running] : jobs_) {
      const std::shared_ptr<Job>& job = running.job;
      v1::JobStatus* out = response->add_jobs();
      out->set_job_id(id);
      for (int rank : job->ranks()) out->add_ranks(rank);
      for (const std::string& device : job->devices()) out->add_devices(device);
      out->set_step(job->last_step());
      out->set_seconds(job->seconds());
    }
    return grpc::Status::OK;
  });
}

grpc::Status AgentService::FreePort(grpc::ServerContext*, const v1::FreePortRequest*, v1::FreePortResponse* response) {
  return Guarded("FreePort", [&] {
    response->set_port(FindFreePort());
    return grpc::Status::OK;
  });
}

}  // namespace poplar
