// The devices an agent offers: NVIDIA GPUs found through NVML at run time (so the agent
// builds and runs without CUDA) and the emulated CPU devices of its config.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent/agent_config.h"

namespace poplar {

struct DeviceInfo {
  std::string type;  // GPU: NVML name with spaces as '-'; emulated: the config's type
  int index = 0;     // GPU: CUDA index; emulated: position among emulated devices
  std::int64_t memory_bytes = 0;
  std::string compute_capability;  // "9.0"; empty when emulated
  bool emulated = false;
  // Emulation settings (emulated devices only).
  int threads = 1;
  double slowdown = 1.0;
};

// GPUs visible through libnvidia-ml.so.1, in CUDA index order. Empty, with `why_none`
// set, when the library or a driver is missing.
std::vector<DeviceInfo> DiscoverNvidiaGpus(std::string* why_none);

// This node's devices now: GPUs (when the config asks for discovery) then emulated ones.
// `why_no_gpu`, when given, receives why GPU discovery found none (empty otherwise).
std::vector<DeviceInfo> ListDevices(const AgentConfig& config, std::string* why_no_gpu = nullptr);

}  // namespace poplar

namespace poplar {

// A request names a device this node does not have (now): it vanished, or the
// cluster file and the node disagree. The service answers FAILED_PRECONDITION.
class DeviceUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device's name on this node, "<type> <index>" ("NVIDIA-H200 3"): the key of DeviceHolders.
std::string DeviceKey(const DeviceInfo& device);

// The devices in use on this node and what uses each ("job 'exp1'", "a profile"): a
// device runs one job or one profile at a time, so that neither runs out of memory or
// measures the other.
using DeviceHolders = std::map<std::string, std::string>;

// "; busy: <key> (<holder>), ..." for the held devices of `type`; empty if none is held.
std::string BusyNote(const std::vector<DeviceInfo>& devices, const std::string& type, const DeviceHolders& busy);

// The first device of `type` not in `busy`, or throws DeviceUnavailable listing what the
// node has, or which job holds each device of that type.
const DeviceInfo& FindDevice(const std::vector<DeviceInfo>& devices, const std::string& type,
                             const DeviceHolders& busy = {});

}  // namespace poplar
