#include "agent/devices.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <utility>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/number_list.h"

namespace poplar {
namespace {

// The few NVML entry points used, declared here so that no CUDA header is needed; the
// signatures are NVML's stable C ABI (nvml.h).
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
using InitFn = int (*)();
using CountFn = int (*)(unsigned int*);
using HandleFn = int (*)(unsigned int, NvmlDevice*);
using NameFn = int (*)(NvmlDevice, char*, unsigned int);
using MemoryFn = int (*)(NvmlDevice, NvmlMemory*);
using CapabilityFn = int (*)(NvmlDevice, int*, int*);
using MinorNumberFn = int (*)(NvmlDevice, unsigned int*);
// nvmlDeviceGetComputeRunningProcesses*: fills up to *count records of the version's
// nvmlProcessInfo layout, each beginning with the pid (unsigned int).
using ProcessesFn = int (*)(NvmlDevice, unsigned int*, void*);
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;

template <typename Fn>
Fn Symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}

// The newest process query the library has, with its record size: v3 (pid, used
// memory, GPU and compute instance, protected memory: 32 bytes), v2 (24), v1 (16).
struct ProcessQuery {
  ProcessesFn call = nullptr;
  std::size_t record_bytes = 0;
};

ProcessQuery FindProcessQuery(void* library) {
  const std::pair<const char*, std::size_t> versions[] = {{"nvmlDeviceGetComputeRunningProcesses_v3", 32},
                                                          {"nvmlDeviceGetComputeRunningProcesses_v2", 24},
                                                          {"nvmlDeviceGetComputeRunningProcesses", 16}};
  for (const auto& [name, bytes] : versions) {
    if (auto call = Symbol<ProcessesFn>(library, name)) return {call, bytes};
  }
  return {};
}

// The pids computing on `device`; empty when the library cannot say.
std::vector<unsigned int> ComputeProcesses(const ProcessQuery& query, NvmlDevice device) {
  std::vector<unsigned int> pids;
  if (!query.call) return pids;
  unsigned int count = 16;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<unsigned char> records(count * query.record_bytes);
    unsigned int filled = count;
    const int status = query.call(device, &filled, records.data());
    if (status == kNvmlInsufficientSize) {
      count = filled + 8;  // more appeared; ask again with room
      continue;
    }
    if (status != kNvmlSuccess) break;
    for (unsigned int i = 0; i < filled && i < count; ++i) {
      unsigned int pid = 0;
      std::memcpy(&pid, records.data() + i * query.record_bytes, sizeof(pid));
      pids.push_back(pid);
    }
    break;
  }
  return pids;
}

}  // namespace

std::vector<DeviceInfo> DiscoverNvidiaGpus(const std::string& library_name, std::string* why_none) {
  void* library = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    // A name the loader cannot find is the usual case (no driver); a file that exists
    // but does not load (not a library, wrong architecture) says why.
    const char* reason = dlerror();
    const bool missing = library_name.find('/') == std::string::npos
                             ? reason == nullptr || std::string(reason).find("No such file") != std::string::npos
                             : access(library_name.c_str(), F_OK) != 0;
    *why_none = missing ? "no NVIDIA driver (" + library_name + " not found)"
                        : "cannot load " + library_name + ": " + (reason ? reason : "unknown reason");
    return {};
  }
  auto init = Symbol<InitFn>(library, "nvmlInit_v2");
  auto shutdown = Symbol<InitFn>(library, "nvmlShutdown");
  auto count_devices = Symbol<CountFn>(library, "nvmlDeviceGetCount_v2");
  auto handle_of = Symbol<HandleFn>(library, "nvmlDeviceGetHandleByIndex_v2");
  auto name_of = Symbol<NameFn>(library, "nvmlDeviceGetName");
  auto memory_of = Symbol<MemoryFn>(library, "nvmlDeviceGetMemoryInfo");
  auto capability_of = Symbol<CapabilityFn>(library, "nvmlDeviceGetCudaComputeCapability");
  // Optional: what Slurm names a GPU by (its /dev/nvidiaN), and its UUID.
  auto minor_number_of = Symbol<MinorNumberFn>(library, "nvmlDeviceGetMinorNumber");
  auto uuid_of = Symbol<NameFn>(library, "nvmlDeviceGetUUID");
  const ProcessQuery processes_query = FindProcessQuery(library);
  std::vector<DeviceInfo> gpus;
  unsigned int count = 0;
  if (!init || !shutdown || !count_devices || !handle_of || !name_of || !memory_of || !capability_of) {
    *why_none = library_name + " lacks the NVML functions poplar uses";
  } else if (init() != 0) {
    *why_none = "NVML failed to initialise (is the NVIDIA driver loaded?)";
  } else {
    if (count_devices(&count) == 0) {
      for (unsigned int i = 0; i < count; ++i) {
        NvmlDevice device = nullptr;
        char name[96] = {};
        NvmlMemory memory{};
        int major = 0, minor = 0;
        if (handle_of(i, &device) != 0 || name_of(device, name, sizeof(name)) != 0 || memory_of(device, &memory) != 0 ||
            capability_of(device, &major, &minor) != 0) {
          continue;
        }
        DeviceInfo gpu;
        gpu.type = name;
        for (char& c : gpu.type) c = c == ' ' ? '-' : c;
        gpu.index = static_cast<int>(i);
        gpu.memory_bytes = static_cast<std::int64_t>(memory.total);
        gpu.compute_capability = std::to_string(major) + "." + std::to_string(minor);
        gpu.processes = ComputeProcesses(processes_query, device);
        if (unsigned int number = 0; minor_number_of && minor_number_of(device, &number) == 0) {
          gpu.minor_number = static_cast<int>(number);
        }
        // NVML's largest UUID (a MIG device's) fills 96 bytes with its terminating NUL.
        if (char uuid[97] = {}; uuid_of && uuid_of(device, uuid, 96) == 0) gpu.uuid = uuid;
        gpus.push_back(gpu);
      }
    }
    if (gpus.empty()) *why_none = "NVML reports no GPU";
    shutdown();
  }
  dlclose(library);
  return gpus;
}

std::vector<DeviceInfo> GpusOfSlurmJob(const std::vector<DeviceInfo>& gpus, const std::string& ids,
                                       const std::string& variable) {
  const std::optional<std::vector<int>> listed = ParseNumberList(ids, 4096);
  if (!listed) {
    throw InputError(variable, "", "'" + ids.substr(0, 200) + "' is not a list of GPU ids (\"0,2\" or \"0-3\")");
  }
  const std::set<int> held(listed->begin(), listed->end());
  std::vector<DeviceInfo> kept;
  for (const DeviceInfo& gpu : gpus) {
    if (held.count(gpu.minor_number >= 0 ? gpu.minor_number : gpu.index) > 0) kept.push_back(gpu);
  }
  return kept;
}

std::vector<DeviceInfo> ListDevices(const AgentConfig& config, std::string* why_no_gpu) {
  std::vector<DeviceInfo> devices;
  std::string why_none;
  if (config.discover_gpus) devices = DiscoverNvidiaGpus(config.nvml_library, &why_none);
  if (why_no_gpu) *why_no_gpu = why_none;
  int index = 0;
  for (const auto& spec : config.emulated) {
    for (int i = 0; i < spec.count; ++i) {
      DeviceInfo device;
      device.type = spec.type;
      device.index = index++;
      device.memory_bytes = spec.memory_bytes;
      device.emulated = true;
      device.emulation = spec;
      device.emulation.count = 1;
      device.emulation.cpus = DeviceCpus(spec, i);
      devices.push_back(device);
    }
  }
  return devices;
}

}  // namespace poplar

namespace poplar {

std::string DeviceKey(const DeviceInfo& device) { return device.type + " " + std::to_string(device.index); }

std::string Holder(const DeviceInfo& device, const DeviceHolders& busy) {
  if (const auto held = busy.find(DeviceKey(device)); held != busy.end()) return held->second;
  if (device.processes.empty()) return "";
  return (device.processes.size() == 1 ? "process " : "processes ") +
         Join(device.processes, ", ", [](unsigned int pid) { return std::to_string(pid); }) +
         ", not started by this agent";
}

std::string BusyNote(const std::vector<DeviceInfo>& devices, const std::string& type, const DeviceHolders& busy) {
  std::string note;
  for (const auto& device : devices) {
    const std::string holder = Holder(device, busy);
    if (device.type != type || holder.empty()) continue;
    note += (note.empty() ? "; busy: " : ", ") + DeviceKey(device) + " (" + holder + ")";
  }
  return note;
}

const DeviceInfo& FindDevice(const std::vector<DeviceInfo>& devices, const std::string& type,
                             const DeviceHolders& busy) {
  for (const auto& device : devices) {
    if (device.type == type && Holder(device, busy).empty()) return device;
  }
  const std::string note = BusyNote(devices, type, busy);
  if (!note.empty()) {
    throw DeviceUnavailable("every device of type '" + type + "' on this node is in use" + note);
  }
  DeviceOfType(devices, type);  // throws: there is none
  throw std::logic_error("FindDevice: a device of type '" + type + "' is neither free nor held");
}

const DeviceInfo& DeviceOfType(const std::vector<DeviceInfo>& devices, const std::string& type) {
  for (const auto& device : devices) {
    if (device.type == type) return device;
  }
  const std::string have = Join(devices, ", ", [](const DeviceInfo& device) { return device.type; });
  throw DeviceUnavailable("this node has no device of type '" + type + "' (it has: " + (have.empty() ? "none" : have) +
                          ")");
}

}  // namespace poplar
