// Communication and optimizer terms of the step-time model (docs/cost-model.md).
//
// Collectives are rings over the slowest link in use. For B bytes over N ranks with
// per-direction bandwidth W and per-hop latency a:
//   all-reduce      2 (N-1)/N * B/W + 2 (N-1) a
//   reduce-scatter    (N-1)/N * B/W +   (N-1) a
//   all-gather        (N-1)/N * B/W +   (N-1) a
// With one rank every collective is free.
#pragma once

#include <cstdint>

#include "planner/cluster.h"
#include "planner/precision.h"

namespace poplar {

double RingAllReduceSeconds(double bytes, int ranks, const LinkSpec& link);
double RingReduceScatterSeconds(double bytes, int ranks, const LinkSpec& link);
double RingAllGatherSeconds(double bytes, int ranks, const LinkSpec& link);

// Communication of one optimizer step for a ZeRO stage, split by when it happens:
//   stage 0: all-reduce(grads) once per step
//   stage 1: reduce-scatter(grads) + all-gather(params) once per step
//   stage 2: reduce-scatter(grads) every round; all-gather(params) once per step
//   stage 3: all-gather(params) twice (forward, backward) + reduce-scatter(grads)
//            every round; nothing once per step
// Gradients and parameters travel in the working precision (4 bytes fp32, 2 mixed).
struct StageCommunication {
  double per_step_s = 0;   // once per optimizer step
  double per_round_s = 0;  // once per reduce round (stages 2 and 3)
};

StageCommunication CommunicationForStage(int stage, std::int64_t params, Precision precision,
                                         int ranks, const LinkSpec& link);

// Optimizer step time on one device: the profiled time scaled by the number of
// parameters the rank updates (all of them at stage 0, ceil(P/N) from stage 1 on).
double OptimizerSeconds(double profiled_step_s, int stage, std::int64_t params,
                        int profiled_world_size, int world_size);

}  // namespace poplar
