// `poplar-worker network`: times the collectives that training uses, among every rank of
// a job, with the backend, device and payload type that training will use. `poplar
// network` starts it on every device of a cluster through the agents and fits the lines
// the planner charges instead of a declared link (planner/formats/network.h).
//
// For each payload size (4 KiB, then x4 up to `max_bytes`, and below an eighth of the
// smallest emulated memory among the ranks)
// and each collective (all-reduce, reduce-scatter, all-gather), every rank runs three
// warm-ups and then timed runs as training meets a collective, the others waiting in it
// for the last rank to arrive: after a barrier every rank calls at once but one, which
// calls 2 ms later (each rank in turn), and the run's time is that rank's, from its call
// until its device is done. At least `repeats` runs, and for fast collectives as many as
// fill 50 ms (at most 50); the point is the median over the runs. Rank 0 writes a line
// per point to --metrics:
//   {"collective": "all_gather", "bytes": 65536, "seconds": 0.00042, "world_size": 3,
//    "backend": "gloo"}
// and a readable line to stdout. The payload is the caller's tensor (an all-reduce's
// tensor, a reduce-scatter's input, an all-gather's output). With `state_shares` the
// reduce-scatter and all-gather move uneven chunks, each rank's as a plan's state_share
// gives it (launcher/zero/flat_layout.h: ShareSlices), as training does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/device/device_flags.h"

namespace poplar {

struct NetworkOptions {
  DeviceFlags device;              // memory_bytes: payloads stay below an eighth of it;
                                   // slowdown: unused (nothing is computed)
  std::string backend = "auto";    // as `train --backend`
  std::string precision = "fp32";  // payload type: fp32, or bf16
  std::string metrics;             // rank 0's lines ({rank} allowed, as for train)
  std::int64_t max_bytes = 64 << 20;
  int repeats = 5;
  int timeout_s = 120;
  std::vector<double> state_shares;  // one per rank, or none: even chunks
};

void MeasureNetwork(const NetworkOptions& options);

}  // namespace poplar
