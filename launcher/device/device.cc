#include "launcher/device/device.h"

#include <malloc.h>
#include <sched.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#ifdef POPLAR_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "launcher/device/counting_allocator.h"
#include "planner/base/input_error.h"
#include "planner/base/number_list.h"

namespace poplar {

#ifdef POPLAR_WITH_CUDA
namespace {

c10::DeviceIndex Index(torch::Device device) { return device.has_index() ? device.index() : 0; }

// The caching allocator's byte counters ({current, peak, ...}) of every pool together
// (StatType AGGREGATE, index 0 in every libtorch 2.x; the Stat type moved between
// namespaces across versions, hence auto).
auto AllocatedBytes(torch::Device device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(Index(device)).allocated_bytes[0];
}

cudaDeviceProp Properties(torch::Device device) {
  cudaDeviceProp properties{};
  const cudaError_t status = cudaGetDeviceProperties(&properties, Index(device));
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(status));
  }
  return properties;
}

std::string VersionText(int version) {  // 13000 -> "13.0"
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace
#endif

bool BuiltWithCuda() {
#ifdef POPLAR_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// Each function below has a GPU branch only in CUDA builds; the CPU's counters are the
// counting allocator's.
std::int64_t MemoryInUse(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) return AllocatedBytes(device).current;
#endif
  return CountingAllocator::InUse();
}

std::int64_t MemoryPeak(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) return AllocatedBytes(device).peak;
#endif
  return CountingAllocator::Peak();
}

void ResetMemoryPeak(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::resetPeakStats(Index(device));
#endif
  CountingAllocator::ResetPeak();
}

std::int64_t MemoryCapacity(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) return static_cast<std::int64_t>(Properties(device).totalGlobalMem);
#endif
  return CountingAllocator::Capacity();
}

void ReleaseCachedMemory(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

bool ComputesInBf16(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) return Properties(device).major >= 8;
#endif
  return true;
}

std::string DeviceDescription(torch::Device device) {
#ifdef POPLAR_WITH_CUDA
  if (device.is_cuda()) {
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    const cudaDeviceProp properties = Properties(device);
    return std::string(properties.name) + " (compute capability " + std::to_string(properties.major) + "." +
           std::to_string(properties.minor) + "), CUDA runtime " + VersionText(runtime) + ", driver API " +
           VersionText(driver);
  }
#endif
  return "CPU";
}

namespace {

// The CPU keeps the memory it frees, as the CUDA caching allocator keeps GPU memory.
// Otherwise glibc hands large blocks back to the system (mmap, heap trimming) and faults
// them in again, so a step's time would depend on what ran before it, and a profile
// would not time the optimizer step as training runs it.
void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest, which also fixes it (no adapting)
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

}  // namespace

void RunOnCpus(const std::string& text) {
  const std::optional<std::vector<int>> cpus = ParseNumberList(text, CPU_SETSIZE);
  if (!cpus || cpus->empty()) throw InputError("--cpus", "", "'" + text.substr(0, 100) + "' is not a list of CPUs");
  cpu_set_t wanted;
  CPU_ZERO(&wanted);
  for (const int cpu : *cpus) {
    if (cpu >= CPU_SETSIZE) throw InputError("--cpus", "", "CPU " + std::to_string(cpu) + " is out of range");
    CPU_SET(cpu, &wanted);
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (const int cpu : *cpus) {
      if (!CPU_ISSET(cpu, &allowed)) {
        throw InputError("--cpus", "",
                         "CPU " + std::to_string(cpu) + " is not one this process may run on (" +
                             std::to_string(CPU_COUNT(&allowed)) + " allowed; see nproc, taskset -p)");
      }
    }
  }
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    if (sched_setaffinity(tid, sizeof wanted, &wanted) != 0 && errno != ESRCH) {
      throw InputError("--cpus", "", "binding to CPUs " + text + " failed: " + std::strerror(errno));
    }
  }
}

torch::Device SetUpDevice(const DeviceFlags& flags, int local_rank) {
  CountingAllocator::Install();
  const torch::Device device = SelectDevice(flags.kind, local_rank);
  if (device.is_cuda() && (flags.memory_bytes > 0 || flags.slowdown > 1.0 || flags.gflops > 0 || !flags.cpus.empty())) {
    throw InputError(flags.memory_bytes > 0 ? "--memory-bytes"
                     : flags.slowdown > 1.0 ? "--slowdown"
                     : flags.gflops > 0     ? "--gflops"
                                            : "--cpus",
                     "", "emulates a device on the CPU; a GPU is used as it is");
  }
  if (!flags.cpus.empty()) RunOnCpus(flags.cpus);
  CountingAllocator::SetCapacity(flags.memory_bytes);
  if (flags.threads > 0) torch::set_num_threads(flags.threads);
  return device;
}

torch::Device SelectDevice(const std::string& kind, int local_rank) {
  if (kind != "cuda") {
    KeepFreedMemory();
    return torch::kCPU;
  }
  if (!BuiltWithCuda()) {
    throw InputError("--device", "",
                     "cuda: this poplar-worker was built against a libtorch without "
                     "CUDA (docs/operations.md, \"Building the worker for CUDA\")");
  }
  if (!torch::cuda::is_available()) {
    throw InputError("--device", "",
                     "cuda: no GPU is visible (check nvidia-smi and "
                     "CUDA_VISIBLE_DEVICES)");
  }
  const auto count = static_cast<int>(torch::cuda::device_count());
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
#ifdef POPLAR_WITH_CUDA
  // The current device too, for whatever uses it implicitly (NCCL's barrier, streams).
  c10::cuda::set_device(device.index());
#endif
  // Start CUDA and its caching allocator now: the memory counters refuse a device the
  // allocator has not been initialised for.
  torch::empty({0}, torch::TensorOptions().device(device));
#ifdef POPLAR_WITH_CUDA
  // This thread's CUDA work runs on a stream of the worker's own, not on the legacy
  // default stream, on which CUDA graphs cannot be captured (micro_batch_graphs.h).
  // Autograd records the stream of every node as it is built (the parameters' gradient
  // accumulators when the engine is made): all of a micro-batch is then on this one.
  c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
#endif
  return device;
}

std::int64_t BucketElements(double mib, torch::Device device) {
  if (mib <= 0) mib = device.is_cuda() ? 25.0 : 1.0;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(mib * (1 << 20) / 4));
}

void Synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace poplar
