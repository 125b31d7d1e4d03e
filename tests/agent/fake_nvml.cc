// A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1), so that the
// agent's GPU discovery and busy checks run on machines without a GPU. It exports the
// entry points agent/devices.cc opens, with NVML's C ABI, and describes the GPUs named
// by the environment variable FAKE_NVML_GPUS, read at nvmlInit_v2:
//
//   FAKE_NVML_GPUS="NVIDIA H200|150754820096|9.0|;NVIDIA H200|150754820096|9.0|4242,4243"
//
// one GPU per ';'-separated entry: name, memory in bytes, compute capability, the pids
// computing on it (comma-separated, possibly none), and optionally its device minor
// number (/dev/nvidiaN; default: its index). Its UUID is "GPU-fake-<minor number>".
// Unset: no GPU.
// FAKE_NVML_FAIL_INIT=1 makes nvmlInit_v2 fail as with no driver loaded.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct FakeGpu {
  std::string name;
  unsigned long long memory = 0;
  int major = 0;
  int minor = 0;
  std::vector<unsigned int> pids;
  unsigned int minor_number = 0;
};

std::vector<FakeGpu> gpus;

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.push_back("");
  return parts;
}

// NVML's process record, version 3 (nvml.h: nvmlProcessInfo_t): 32 bytes.
struct ProcessInfoV3 {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
  unsigned long long used_gpu_cc_protected_memory;
};
static_assert(sizeof(ProcessInfoV3) == 32, "NVML's v3 process record is 32 bytes");

// A handle is the GPU's index plus one (NVML handles are opaque pointers).
const FakeGpu* Gpu(void* device) {
  const auto index = reinterpret_cast<std::uintptr_t>(device) - 1;
  return index < gpus.size() ? &gpus[index] : nullptr;
}

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kInsufficientSize = 7;

}  // namespace

extern "C" {

int nvmlInit_v2() {
  if (std::getenv("FAKE_NVML_FAIL_INIT")) return kUninitialized;
  // A slow driver (nvmlInit can take seconds on a busy node): every device listing waits.
  if (const char* delay = std::getenv("FAKE_NVML_INIT_DELAY_MS")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
  }
  gpus.clear();
  const char* spec = std::getenv("FAKE_NVML_GPUS");
  if (!spec || !*spec) return kSuccess;
  for (const std::string& entry : Split(spec, ';')) {
    const std::vector<std::string> fields = Split(entry, '|');
    if (fields.size() != 4 && fields.size() != 5) return kInvalidArgument;
    FakeGpu gpu;
    gpu.name = fields[0];
    gpu.memory = std::strtoull(fields[1].c_str(), nullptr, 10);
    const auto dot = fields[2].find('.');
    gpu.major = std::atoi(fields[2].substr(0, dot).c_str());
    gpu.minor = std::atoi(fields[2].substr(dot + 1).c_str());
    for (const std::string& pid : Split(fields[3], ',')) {
      if (!pid.empty()) gpu.pids.push_back(static_cast<unsigned int>(std::strtoul(pid.c_str(), nullptr, 10)));
    }
    gpu.minor_number = fields.size() == 5 ? static_cast<unsigned int>(std::strtoul(fields[4].c_str(), nullptr, 10))
                                          : static_cast<unsigned int>(gpus.size());
    gpus.push_back(gpu);
  }
  return kSuccess;
}

int nvmlShutdown() { return kSuccess; }

int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = static_cast<unsigned int>(gpus.size());
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index >= gpus.size()) return kInvalidArgument;
  *device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  const FakeGpu* gpu = Gpu(device);
  if (!gpu || gpu->name.size() + 1 > length) return kInvalidArgument;
  std::memcpy(name, gpu->name.c_str(), gpu->name.size() + 1);
  return kSuccess;
}

int nvmlDeviceGetMemoryInfo(void* device, unsigned long long* memory) {  // {total, free, used}
  const FakeGpu* gpu = Gpu(device);
  if (!gpu) return kInvalidArgument;
  memory[0] = gpu->memory;
  memory[1] = gpu->memory;
  memory[2] = 0;
  return kSuccess;
}

int nvmlDeviceGetCudaComputeCapability(void* device, int* major, int* minor) {
  const FakeGpu* gpu = Gpu(device);
  if (!gpu) return kInvalidArgument;
  *major = gpu->major;
  *minor = gpu->minor;
  return kSuccess;
}

int nvmlDeviceGetMinorNumber(void* device, unsigned int* minor_number) {
  const FakeGpu* gpu = Gpu(device);
  if (!gpu) return kInvalidArgument;
  *minor_number = gpu->minor_number;
  return kSuccess;
}

int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  const FakeGpu* gpu = Gpu(device);
  if (!gpu) return kInvalidArgument;
  const std::string text = "GPU-fake-" + std::to_string(gpu->minor_number);
  if (text.size() + 1 > length) return kInsufficientSize;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return kSuccess;
}

// As NVML: with too small a buffer, says how many records there are and fills none.
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfoV3* records) {
  const FakeGpu* gpu = Gpu(device);
  if (!gpu) return kInvalidArgument;
  const auto have = static_cast<unsigned int>(gpu->pids.size());
  if (*count < have) {
    *count = have;
    return kInsufficientSize;
  }
  for (unsigned int i = 0; i < have; ++i) records[i] = ProcessInfoV3{gpu->pids[i], 1u << 30, 0, 0, 0};
  *count = have;
  return kSuccess;
}

}  // extern "C"
