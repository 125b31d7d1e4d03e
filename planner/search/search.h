// The poplar search: for one stage, the schedule with the smallest predicted step time
// (simulator.h) for the global batch, exactly, over integer micro-batches within each
// class's memory cap. docs/cost-model.md ("Search") gives the argument; in short:
//
// Stages 0-1 (one synchronisation per step). Only the compute phase depends on the
// schedule, and it is the slowest device's accumulated time. For each class, F(s) =
// least time to process s samples in micro-batches of at most the cap (a dynamic
// programme over s, non-decreasing in s). The optimum makespan T* is the smallest value
// F_c(s) such that sum over classes of count_c * max{s : F_c(s) <= T*} >= global batch,
// found by binary search over those values.
//
// Stages 2-3 (synchronisation every round). A round whose slowest device takes tau
// holds at most K(tau) = sum_c count_c * max{b <= cap_c : time_c(b) <= tau} samples,
// and only the values tau = time_c(b) matter. Choosing rounds is then an unbounded
// covering knapsack: pick round kinds (tau_j + per-round communication, K_j) with total
// capacity >= global batch at least total cost; a dynamic programme over the number of
// samples solves it exactly.
//
// Work: stages 0-1 O(sum_c S_c * cap_c) with S_c the most samples a device of class c
// can usefully take; stages 2-3 O(B * k) with k the round kinds below the global batch
// B. Neither depends on how many devices a class has.
#pragma once

#include <optional>

#include "planner/search/schedule.h"
#include "planner/search/stage_problem.h"

namespace poplar {

// nullopt when the problem is infeasible (problem.feasible is false).
std::optional<Schedule> SearchSchedule(const StageProblem& problem);

}  // namespace poplar
