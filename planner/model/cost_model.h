// Communication and optimizer terms of the step-time model (docs/cost-model.md).
//
// Collective times come from planner/formats/network.h: rings over the cluster file's slowest
// link in use, or lines measured on the cluster (`poplar network`).
#pragma once

#include <cstdint>

#include "planner/formats/network.h"
#include "planner/formats/precision.h"
#include "planner/formats/profile.h"

namespace poplar {

// The cost model's table of what a ZeRO stage moves of P parameters:
//   stage 0: all-reduce(grads) once per step
//   stage 1: reduce-scatter(grads) + all-gather(params) once per step
//   stage 2: reduce-scatter(grads) every round; all-gather(params) once per step
//   stage 3: all-gather(params) twice (forward, backward) + reduce-scatter(grads)
//            every round; nothing once per step
// each in one call. A profile's `collectives` (the worker's own schedule) take its place.
CollectiveParams TableCollectiveParams(int stage, std::int64_t params);

// The training loop's own all-reduces of one scalar each, once per step beside the
// engine's collectives: the step's summed loss (every stage) and the squared gradient
// norm (stages 1-3, whose ranks own different slices). Only on 2+ ranks. They carry
// nothing to speak of, but each pays the all-reduce's fixed cost.
CollectiveUse ScalarAllReducesPerStep(int stage);

// Communication of one optimizer step, split by when it happens.
struct StageCommunication {
  double per_step_s = 0;   // once per optimizer step
  double per_round_s = 0;  // once per reduce round (stages 2 and 3)
};

// The time of moving `moved` in the working precision (4 bytes fp32, 2 mixed): each
// call pays the collective's fixed cost, the bytes its rate. `slice_pace`: with uneven
// state shares the rank with the largest slice receives the most, so the bytes of every
// reduce-scatter and all-gather take N times the largest per-rank share longer than the
// even split's (1 for the even split; docs/cost-model.md).
StageCommunication CommunicationForStage(const CollectiveParams& moved, Precision precision,
                                         const CollectiveTimes& collectives, double slice_pace = 1.0);

// Optimizer step time on one device: the profiled time's fixed part as it is, the rest
// scaled by the number of parameters the rank updates (all of them at stage 0, ceil(f P)
// from stage 1 on for a rank holding the fraction f of the partitioned state: 1/N for
// ZeRO's even split). `profiled_share`: the fraction the profiling rank held
// (StageProfile::HeldShare); `fixed_s` (StageProfile::optimizer_fixed_s) at most
// `profiled_step_s`.
double OptimizerSeconds(double profiled_step_s, double fixed_s, int stage, std::int64_t params, double profiled_share,
                        double share);

}  // namespace poplar
