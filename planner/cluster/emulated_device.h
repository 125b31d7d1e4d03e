// Emulated CPU devices (docs/worker.md, "Emulated devices"): a type, a count, and how
// each worker stretches and caps its compute. Agent files declare the devices their node
// offers (`emulated:`); a cluster file's `slurm.emulated` declares those of every node
// of a Slurm allocation. Both are read here, the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace poplar {

class YamlFields;

struct EmulatedDeviceSpec {
  std::string type;
  int count = 1;
  int threads = 1;                // intra-op CPU threads of each worker
  double slowdown = 1.0;          // compute time is stretched by this factor (>= 1)
  double gflops = 0;              // the declared rate: compute lasts at least its FLOPs over it; 0: none
  std::int64_t memory_bytes = 0;  // enforced cap (> 0)
  // `later`: from this step of every training run on, compute is stretched by
  // later_slowdown instead (a device that throttles, or recovers); profiles measure
  // `slowdown`. 0: never.
  std::int64_t later_step = 0;
  double later_slowdown = 1.0;
  // `cpus`: the CPUs the devices of this type run on, `threads` per device in turn (device
  // k of the type takes cpus[k·threads, (k+1)·threads)), as a GPU is its rank's alone.
  // Empty: not bound; the operating system moves each worker between the node's CPUs.
  std::vector<int> cpus;
};

// The CPUs device `k` (0-based, within its type) of `spec` runs on; empty when not bound.
std::vector<int> DeviceCpus(const EmulatedDeviceSpec& spec, int k);

// The list at `key` of `fields` ({type, count, threads, slowdown, gflops, memory_mib,
// later: {step, slowdown}, cpus} each): throws InputError naming the file and the key
// of what is wrong (a bad value, a type declared twice, `cpus` not naming count·threads
// distinct CPUs). Empty when `key` is absent.
std::vector<EmulatedDeviceSpec> ParseEmulatedDevices(YamlFields& fields, const std::string& key);

// The worker's flags for device `k` of `spec`: --threads, --slowdown, --memory-bytes,
// --gflops where the type declares a rate, --cpus where the type is bound and, for
// `training` (a profile measures `slowdown`), --later-slowdown-step with
// --later-slowdown when it changes later.
std::vector<std::string> EmulatedWorkerFlags(const EmulatedDeviceSpec& spec, int k, bool training);

}  // namespace poplar
