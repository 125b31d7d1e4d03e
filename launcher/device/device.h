// The device a worker computes on: the CPU (also for emulated devices) or one CUDA GPU.
// What differs between them is here and only here: choosing the device, counting its
// memory, waiting for it, and naming it in profiles.
//
// CUDA support is compiled in when libtorch is a CUDA build (POPLAR_WITH_CUDA, set by
// launcher/CMakeLists.txt); elsewhere asking for "cuda" is refused with an InputError.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "launcher/device/device_flags.h"

namespace poplar {

// True when this worker was built against a CUDA libtorch.
bool BuiltWithCuda();

// Readies the process's device: the counting allocator with the emulated cap, the
// thread count, the CPUs (RunOnCpus) and the device (SelectDevice). Throws InputError
// when a GPU is given emulation flags, or cannot be used.
torch::Device SetUpDevice(const DeviceFlags& flags, int local_rank);

// Binds every thread of this process to the CPUs of `text` ("0-3,8"), those that exist
// now and those it starts later (they inherit the mask): an emulated device computes on
// CPUs of its own, as a GPU is its rank's alone. Throws InputError naming --cpus for a
// list that does not parse or CPUs this process may not run on (outside its cgroup's,
// or beyond the machine's).
void RunOnCpus(const std::string& text);

// "cpu", or "cuda": GPU `local_rank` modulo the visible GPUs (the agent narrows them
// with CUDA_VISIBLE_DEVICES), made current with a stream of its own for this thread.
// Throws InputError when no GPU can be used, with the reason.
torch::Device SelectDevice(const std::string& kind, int local_rank);

// Bytes of tensor memory on `device`: in use now, the peak since the last ResetPeak,
// and the device's capacity. On the CPU these are the counting allocator's
// (counting_allocator.h), whose capacity is the emulated memory (0: none); on a GPU
// the CUDA caching allocator's, and the card's total memory.
std::int64_t MemoryInUse(torch::Device device);
std::int64_t MemoryPeak(torch::Device device);
void ResetMemoryPeak(torch::Device device);
std::int64_t MemoryCapacity(torch::Device device);
// After an out-of-memory error: hand cached blocks back so that the next, smaller try
// starts from an unfragmented device (a no-op on the CPU); also before a CUDA graph's
// capture, which allocates from a pool of its own.
void ReleaseCachedMemory(torch::Device device);

// Elements (fp32 slots) per gradient/parameter bucket for a bucket size in MiB, where 0
// means the device's default: 1 MiB on the CPU (Gloo; and small buckets stay in cache
// for the optimizer's passes), 25 MiB on a GPU (NCCL, where big buckets pay off).
// Training and profiling share it, so that a profile times the optimizer step that
// training will take.
std::int64_t BucketElements(double mib, torch::Device device);

// Waits for the work queued on `device` (a no-op on the CPU), so that host clocks time it.
void Synchronize(torch::Device device);

// For profile labels: "NVIDIA H200, CUDA 13.0, driver 580.159", or "CPU".
std::string DeviceDescription(torch::Device device);
// Whether the device computes in bf16: an NVIDIA GPU of compute capability 8.0 or newer
// (Ampere on; V100 and T4 have fp16 alone), or the CPU.
bool ComputesInBf16(torch::Device device);

}  // namespace poplar
