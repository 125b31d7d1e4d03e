// Communication and optimizer terms of the step-time model (docs/cost-model.md).
//
// Collective times come from planner/network.h: rings over the cluster file's slowest
// link in use, or lines measured on the cluster (`poplar network`).
#pragma once

#include <cstdint>

#include "planner/network.h"
#include "planner/precision.h"

namespace poplar {

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
                                         const CollectiveTimes& collectives);

// Optimizer step time on one device: the profiled time scaled by the number of
// parameters the rank updates (all of them at stage 0, ceil(P/N) from stage 1 on).
double OptimizerSeconds(double profiled_step_s, int stage, std::int64_t params,
                        int profiled_world_size, int world_size);

}  // namespace poplar
