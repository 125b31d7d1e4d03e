// The simulator: predicted step time of a schedule under the cost model
// (docs/cost-model.md). It is the single definition of "how long a step takes" that the
// search optimises, the baselines are judged by, and the tests check the search against.
//
//   stages 0-1: step = max over devices of its summed micro-batch times
//                      + per-step communication + slowest optimizer step
//   stages 2-3: step = sum over rounds of (slowest device's micro-batch time that round
//                      + per-round communication) + per-step communication
//                      + slowest optimizer step
#pragma once

#include <vector>

#include "planner/search/schedule.h"
#include "planner/search/stage_problem.h"

namespace poplar {

struct ClassUsage {
  double busy_s = 0;  // mean over the class's devices of time spent computing
  double idle_s = 0;  // mean time waiting for slower devices in the compute phase
};

struct StepPrediction {
  double step_s = 0;
  double compute_s = 0;        // compute phase: until the slowest device is done
  double communication_s = 0;  // all collectives of the step, not overlapped
  double optimizer_s = 0;
  double samples_per_s = 0;
  std::vector<ClassUsage> classes;  // parallel to StageProblem::classes
};

// `schedule` must be valid for `problem` (ValidateSchedule returns "").
StepPrediction Simulate(const StageProblem& problem, const Schedule& schedule);

}  // namespace poplar
