// The CPU allocator of a worker process: counts the bytes of every CPU tensor in use
// and their peak, and, given a capacity (an emulated device's memory), refuses an
// allocation beyond it by throwing c10::OutOfMemoryError, which libtorch and the worker
// handle like a real device's out-of-memory error. Installed once per process with
// c10::SetCPUAllocator; counters are process-wide and thread-safe.
#pragma once

#include <cstdint>

namespace poplar {

class CountingAllocator {
 public:
  // Installs the counting allocator as libtorch's CPU allocator (idempotent).
  static void Install();
  static std::int64_t InUse();
  static std::int64_t Peak();
  static void ResetPeak();  // peak := in use
  // 0: unlimited.
  static void SetCapacity(std::int64_t bytes);
  static std::int64_t Capacity();

  // While one lives, its thread's CPU allocations are host memory, not the emulated
  // device's: neither counted in InUse nor held to the capacity, as a GPU's copies of
  // its tensors in the host's RAM (a checkpoint's) are not on the GPU. Nests.
  class HostMemory {
   public:
    HostMemory();
    ~HostMemory();
    HostMemory(const HostMemory&) = delete;
    HostMemory& operator=(const HostMemory&) = delete;
  };
};

}  // namespace poplar
