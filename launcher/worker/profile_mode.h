// `poplar-worker profile`: measures one device for ZeRO stages 0-3 (docs/worker.md) and
// writes the profile file the planner reads (docs/formats.md).
//
// Pass 1 measures each stage alone (world size 1): a warm-up and timed runs at micro-batch
// sizes 1, 2, 4, ... until one runs out of memory, then a binary search between the last
// size that fitted and the first that did not finds the largest micro-batch. A stage
// (1-3) whose states alone, or with one sample, do not fit is measured holding half of
// the partitioned state, then a quarter, ... down to 1/64, as rank 0 of two whose other
// is absent (flat_layout.h, LayoutWorldSize): the profile records the share, and the
// planner derives what any other share frees or costs. Stage 0 and 1/64 that does not
// fit are errors.
// Out-of-memory errors are caught and recovered from, never fatal. Passes 2..`repeats`
// build each stage's model and engine afresh, stage after stage in a rotating order, and
// time every size that fitted again. A size is timed over consecutive runs until they
// add up to `point_seconds` or number 5 (at least one), as training runs consecutive
// micro-batches of one size. A point records the median time over every timed run of
// every pass and the peak bytes in use. In every pass the optimizer step is timed as
// training takes it: after a last micro-batch, with the buckets training uses by default
// on the device (device.h, BucketElements); the profile records its median. Interleaving the stages
// keeps a drift in the machine's speed from favouring one stage over another.
//
// On a GPU (--device cuda) the card is measured as it is: times after the device has
// finished (synchronised), peak bytes from the CUDA caching allocator, the card's
// memory as memory_bytes, and the card, CUDA and libtorch versions in "source".
// On CPU the device is emulated: `threads` intra-op threads, a `slowdown` factor that
// stretches compute wall time, and `memory_bytes` enforced by the counting allocator.
// The profile says so ("emulated": true and its "source").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/device/device_flags.h"

namespace poplar {

struct ProfileOptions {
  std::string model_config;
  std::string output;       // profile file to write
  std::string device_type;  // the profile's device_type
  DeviceFlags device;       // cuda: GPU 0 of those visible; memory_bytes 0: the
                            // machine's memory, uncapped
  std::vector<int> stages = {0, 1, 2, 3};
  std::string precision = "fp32";  // or bf16
  int repeats = 3;
  double point_seconds = 0.25;     // each size's timed runs in a pass add up to this (<= 5 runs)
  int largest_micro_batch = 4096;  // search limit when memory never runs out
  std::uint64_t seed = 1337;
};

void Profile(const ProfileOptions& options);

}  // namespace poplar
