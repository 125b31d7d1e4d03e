// DeviceFlags: what a worker computes on. A plain struct, free of libtorch, so that the
// options of every mode can hold one; launcher/device/device.h readies the device from it.
#pragma once

#include <cstdint>
#include <string>

namespace poplar {

// The flags that say what a worker computes on, the same in every mode (train, profile,
// network; the agent passes its device's). threads, slowdown, memory_bytes and cpus make a
// CPU process behave like a slower, smaller device of its own (docs/worker.md, "Emulated
// devices"); a GPU is used as it is.
struct DeviceFlags {
  std::string kind = "cpu";       // "cpu" or "cuda"
  int threads = 0;                // intra-op CPU threads; 0: libtorch's default
  double slowdown = 1.0;          // emulated: compute takes this many times its work (>= 1)
  double gflops = 0;              // emulated: compute lasts at least its FLOPs over this rate; 0: none
  std::int64_t memory_bytes = 0;  // emulated: cap on CPU tensor bytes; 0: none
  std::string cpus;               // cpu: the CPUs every thread runs on, "0-3,8"; empty: any
  // cuda: micro-batches whose backward launches no collective (a one-rank job's, at
  // stages 0-1) replay from CUDA graphs (micro_batch_graphs.h); profiles time both ways.
  bool cuda_graphs = true;
};

}  // namespace poplar
