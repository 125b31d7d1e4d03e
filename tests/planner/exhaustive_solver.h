// A reference solver for tests: the least predicted step time of any valid schedule,
// found by enumerating per-device choices rather than by the search's reasoning.
//
// Stages 0-1: for every device and every sample count s, every composition of s into
// micro-batches within the cap (the cheapest is kept); then every distribution of the
// global batch over the devices. Stages 2-3: every per-round vector of per-device
// micro-batches (0..cap each), then a least-cost combination of rounds whose samples
// sum to exactly the global batch. Exponential: tiny problems only.
#pragma once

#include "planner/search/schedule.h"
#include "planner/search/stage_problem.h"

namespace poplar::testing {

struct ReferenceOptimum {
  double step_s = 0;
  Schedule schedule;  // one assignment per device (count 1)
};

ReferenceOptimum SolveExhaustively(const StageProblem& problem);

}  // namespace poplar::testing
