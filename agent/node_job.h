// From a Launch request to the processes of this node's ranks: validates the request,
// maps each rank of this node to one of its devices, writes the job folder
// (<work_dir>/jobs/<id>/: plan.json, model.json, logs/, metrics/, checkpoints/) and
// builds each rank's `poplar-worker train` (or `network`) command line and torchrun
// environment.
// The agent only ever runs its own poplar-worker, with arguments built here.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/devices.h"
#include "agent/job.h"
#include "planner/formats/job_settings.h"

namespace poplar {

// Mirrors poplar.v1.LaunchRequest (see agent.proto for each field's contract).
struct LaunchSettings {
  enum class Kind { kTrain, kNetwork };
  Kind kind = Kind::kTrain;
  std::string job_id;
  std::string node;
  std::string plan_json;
  std::string model_config_json;
  std::string master_addr;
  int master_port = 0;
  std::string precision = "fp32";
  // The job's settings (LaunchRequest.settings: planner/formats/job_settings.h), as
  // sent: CheckNodeJob checks them.
  std::map<std::string, std::string> job_settings;
  std::int64_t trace_step = 0;  // 0: no step traced
  int timeout_s = 0;
  bool resume = false;
  bool require_checkpoint = false;     // with resume: the ranks refuse to start over from step 0
  std::int64_t network_max_bytes = 0;  // kNetwork; 0: the worker's default
};

// Checks the request and builds the ranks' processes without writing anything: ranks
// get devices not in `busy`; each RankProcess names its device (DeviceKey). Throws
// InputError (a bad request: the field and the reason) or DeviceUnavailable.
std::vector<RankProcess> CheckNodeJob(const AgentConfig& config, const std::vector<DeviceInfo>& devices,
                                      const LaunchSettings& settings, const DeviceHolders& busy = {});

// CheckNodeJob, then writes the job folder the processes need (plan.json, model.json,
// logs/, metrics/; a fresh start's old metrics files go).
std::vector<RankProcess> PrepareNodeJob(const AgentConfig& config, const std::vector<DeviceInfo>& devices,
                                        const LaunchSettings& settings, const DeviceHolders& busy = {});

// Where job `job_id`'s checkpoints are on this node: its job folder's checkpoints/, or
// with a shared_dir, <shared_dir>/jobs/<job id>/checkpoints, the same on every node.
std::filesystem::path CheckpointFolder(const AgentConfig& config, const std::string& job_id);

// Hands `plan_json` to rank 0 of job `job_id` as plan `number` (HandPlanSwitch into the
// job folder's plans/, against its plan.json, its global batch within the job's
// batch_min and batch_max where `settings` set them) and returns the announcement.
// Throws InputError naming plan_json and the key.
std::string WritePlanSwitch(const AgentConfig& config, const std::string& job_id, const std::string& plan_json,
                            int number, const std::string& reason, const JobSettings& settings);

// How long the job's stopped ranks may take to end before SIGKILL (Job's stop_grace).
std::chrono::seconds StopGrace(const LaunchSettings& settings);

// Removes the job's folder on this node (<work_dir>/jobs/<job id>), as after a network
// job that finished: its measurements went to the head, nothing in it is wanted again.
void RemoveJobFolder(const AgentConfig& config, const std::string& job_id);

// The emulation flags and environment for a worker on `device` (none for a GPU, which
// gets CUDA_VISIBLE_DEVICES instead), for `training` or profiling
// (planner/cluster/emulated_device.h's EmulatedWorkerFlags).
void AddDeviceSettings(const DeviceInfo& device, bool training, std::vector<std::string>& args,
                       std::vector<std::string>& env);

}  // namespace poplar
