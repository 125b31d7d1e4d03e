// Baseline policies, judged by the same simulator as the poplar search.
//
// uniform (DeepSpeed): one micro-batch size m for every device, the largest the
//   smallest memory allows, and A = ceil(B / (m N)) accumulation steps; every device
//   takes B/N samples (+1 on the first B mod N devices) in A micro-batches of at most
//   m (DeepSpeed itself requires B = m A N exactly; this is the generous form).
//   Infeasible when some device cannot hold one sample.
// proportional (Whale-style): each device's share of the batch is proportional to its
//   measured speed at its largest micro-batch (samples per second); a device splits its
//   share into as few micro-batches as its cap allows (stages 0-1), or into as many
//   rounds as the busiest device needs (stages 2-3).
#pragma once

#include <optional>

#include "planner/search/schedule.h"
#include "planner/search/stage_problem.h"

namespace poplar {

std::optional<Schedule> UniformSchedule(const StageProblem& problem);
std::optional<Schedule> ProportionalSchedule(const StageProblem& problem);

}  // namespace poplar
