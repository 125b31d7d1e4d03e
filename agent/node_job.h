// From a Launch request to the processes of this node's ranks: validates the request,
// maps each rank of this node to one of its devices, writes the job folder
// (<work_dir>/jobs/<id>/: plan.json, model.json, logs/, metrics/, checkpoints/) and
// builds each rank's `poplar-worker train` (or `network`) command line and torchrun
// environment.
// The agent only ever runs its own poplar-worker, with arguments built here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/devices.h"
#include "agent/job.h"

namespace poplar {

// Mirrors poplar.v1.LaunchRequest (see agent.proto for each field's contract).
struct LaunchSettings {
  enum class Kind { kTrain, kNetwork };
  Kind kind = Kind::kTrain;
  std::string job_id;
  std::string node;
  std::string plan_json;
  std::string model_config_json;
  std::string data_path;
  std::string master_addr;
  int master_port = 0;
  std::int64_t steps = 0;
  std::string precision = "fp32";
  std::optional<double> lr, weight_decay, grad_clip;  // unset: the worker's default
  std::int64_t checkpoint_every = 0;
  std::int64_t keep_checkpoints = 0;  // 0: every one
  int timeout_s = 0;
  bool resume = false;
  std::int64_t network_max_bytes = 0;  // kNetwork; 0: the worker's default
};

// Ranks get devices not in `busy`; each RankProcess names its device (DeviceKey).
// Throws InputError (a bad request: the field and the reason) or DeviceUnavailable.
std::vector<RankProcess> PrepareNodeJob(const AgentConfig& config, const std::vector<DeviceInfo>& devices,
                                        const LaunchSettings& settings, const DeviceHolders& busy = {});

// The emulation flags and environment for a worker on `device` (none for a GPU, which
// gets CUDA_VISIBLE_DEVICES instead). Shared by training and profiling.
void AddDeviceSettings(const DeviceInfo& device, std::vector<std::string>& args, std::vector<std::string>& env);

}  // namespace poplar
