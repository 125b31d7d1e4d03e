#include "agent/devices.h"

#include <dlfcn.h>

#include "planner/join.h"

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

template <typename Fn>
Fn Symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}

}  // namespace

std::vector<DeviceInfo> DiscoverNvidiaGpus(std::string* why_none) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *why_none = "no NVIDIA driver (libnvidia-ml.so.1 not found)";
    return {};
  }
  auto init = Symbol<InitFn>(library, "nvmlInit_v2");
  auto shutdown = Symbol<InitFn>(library, "nvmlShutdown");
  auto count_devices = Symbol<CountFn>(library, "nvmlDeviceGetCount_v2");
  auto handle_of = Symbol<HandleFn>(library, "nvmlDeviceGetHandleByIndex_v2");
  auto name_of = Symbol<NameFn>(library, "nvmlDeviceGetName");
  auto memory_of = Symbol<MemoryFn>(library, "nvmlDeviceGetMemoryInfo");
  auto capability_of = Symbol<CapabilityFn>(library, "nvmlDeviceGetCudaComputeCapability");
  std::vector<DeviceInfo> gpus;
  unsigned int count = 0;
  if (!init || !shutdown || !count_devices || !handle_of || !name_of || !memory_of || !capability_of) {
    *why_none = "libnvidia-ml.so.1 lacks the NVML functions poplar uses";
  } else if (init() != 0) {
    *why_none = "NVML failed to initialise (is the NVIDIA driver loaded?)";
  } else {
    if (count_devices(&count) == 0) {
      for (unsigned int i = 0; i < count; ++i) {
        NvmlDevice device = nullptr;
        char name[96] = {};
        NvmlMemory memory{};
        int major = 0, minor = 0;
        if (handle_of(i, &device) != 0 || name_of(device, name, sizeof(name)) != 0 ||
            memory_of(device, &memory) != 0 || capability_of(device, &major, &minor) != 0) {
          continue;
        }
        DeviceInfo gpu;
        gpu.type = name;
        for (char& c : gpu.type) c = c == ' ' ? '-' : c;
        gpu.index = static_cast<int>(i);
        gpu.memory_bytes = static_cast<std::int64_t>(memory.total);
        gpu.compute_capability = std::to_string(major) + "." + std::to_string(minor);
        gpus.push_back(gpu);
      }
    }
    if (gpus.empty()) *why_none = "NVML reports no GPU";
    shutdown();
  }
  dlclose(library);
  return gpus;
}

std::vector<DeviceInfo> ListDevices(const AgentConfig& config, std::string* why_no_gpu) {
  std::vector<DeviceInfo> devices;
  std::string why_none;
  if (config.discover_gpus) devices = DiscoverNvidiaGpus(&why_none);
  if (why_no_gpu) *why_no_gpu = why_none;
  int index = 0;
  for (const auto& spec : config.emulated) {
    for (int i = 0; i < spec.count; ++i) {
      DeviceInfo device;
      device.type = spec.type;
      device.index = index++;
      device.memory_bytes = spec.memory_bytes;
      device.emulated = true;
      device.threads = spec.threads;
      device.slowdown = spec.slowdown;
      devices.push_back(device);
    }
  }
  return devices;
}

}  // namespace poplar

namespace poplar {

std::string DeviceKey(const DeviceInfo& device) { return device.type + " " + std::to_string(device.index); }

std::string BusyNote(const std::vector<DeviceInfo>& devices, const std::string& type, const DeviceHolders& busy) {
  std::string note;
  for (const auto& device : devices) {
    const auto held = busy.find(DeviceKey(device));
    if (device.type != type || held == busy.end()) continue;
    note += (note.empty() ? "; busy: " : ", ") + held->first + " (" + held->second + ")";
  }
  return note;
}

const DeviceInfo& FindDevice(const std::vector<DeviceInfo>& devices, const std::string& type,
                             const DeviceHolders& busy) {
  for (const auto& device : devices) {
    if (device.type == type && !busy.count(DeviceKey(device))) return device;
  }
  const std::string note = BusyNote(devices, type, busy);
  if (!note.empty()) {
    throw DeviceUnavailable("every device of type '" + type + "' on this node is in use" + note);
  }
  const std::string have = Join(devices, ", ", [](const DeviceInfo& device) { return device.type; });
  throw DeviceUnavailable("this node has no device of type '" + type + "' (it has: " +
                          (have.empty() ? "none" : have) + ")");
}

}  // namespace poplar
