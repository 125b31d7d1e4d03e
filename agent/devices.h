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
  // Emulated: the config's settings as for this one device (count 1, its own cpus).
  EmulatedDeviceSpec emulation;
  // GPU: the processes NVML sees computing on it now, whoever started them.
  std::vector<unsigned int> processes;
  // GPU: its device minor number (/dev/nvidiaN; -1: unknown) and UUID (empty: unknown).
  int minor_number = -1;
  std::string uuid = {};
};

// GPUs visible through NVML (`library`, normally libnvidia-ml.so.1), in CUDA index
// order, each with the processes computing on it. Empty, with `why_none` set, when the
// library or a driver is missing.
std::vector<DeviceInfo> DiscoverNvidiaGpus(const std::string& library, std::string* why_none);

// The GPUs of `gpus` a Slurm job holds on this node: those whose device minor number
// (else NVML index) `ids` lists. `ids` is Slurm's list of global GPU ids, as
// SLURM_STEP_GPUS or SLURM_JOB_GPUS give it ("0,2,5"; ranges "0-3" read too), untrusted.
// Throws InputError naming `variable` for a list that is not such numbers.
std::vector<DeviceInfo> GpusOfSlurmJob(const std::vector<DeviceInfo>& gpus, const std::string& ids,
                                       const std::string& variable);

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

// What holds `device`: this agent's job or profile (`busy`), else the processes NVML sees
// on it ("process 4242, not started by this agent"); "" when it is free.
std::string Holder(const DeviceInfo& device, const DeviceHolders& busy);

// "; busy: <key> (<holder>), ..." for the held devices of `type`; empty if none is held.
std::string BusyNote(const std::vector<DeviceInfo>& devices, const std::string& type, const DeviceHolders& busy);

// The first device of `type` not in `busy` and with no process on it, or throws
// DeviceUnavailable listing what the node has, or what holds each device of that type:
// a job or profile of this agent (`busy`), or processes it did not start (a GPU in use
// outside poplar would run out of memory, or time two jobs at once).
const DeviceInfo& FindDevice(const std::vector<DeviceInfo>& devices, const std::string& type,
                             const DeviceHolders& busy = {});

// The first device of `type`, free or not, or throws DeviceUnavailable listing what the
// node has.
const DeviceInfo& DeviceOfType(const std::vector<DeviceInfo>& devices, const std::string& type);

}  // namespace poplar
