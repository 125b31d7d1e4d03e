// Schedule: who processes how many samples in which micro-batch, for one stage.
//
// Devices of one class with identical micro-batch lists are one Assignment with a
// count, so a schedule for 100,000 GPUs of 8 types is a handful of entries; the plan
// file expands it to one entry per rank (plan_file.h).
//
// Stages 0-1: each device has its own list (possibly empty); the lists are processed
// with local gradient accumulation and one synchronisation at the end of the step.
// Stages 2-3: every list has the same length, one entry per reduce round; an entry of
// 0 means the device joins that round's collectives without computing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/search/stage_problem.h"

namespace poplar {

struct Assignment {
  int device_class = 0;  // index into StageProblem::classes
  int count = 0;         // devices with exactly this list, > 0
  std::vector<int> micro_batches;

  std::int64_t Samples() const;
};

struct Schedule {
  int stage = 0;
  std::vector<Assignment> assignments;

  std::int64_t TotalSamples() const;
  int Rounds() const;  // longest micro-batch list
};

// The first reason `schedule` is not valid for `problem` (empty reason: it is), and
// where: class counts, micro-batch sizes within 1..max_micro_batch (0 only as a stage
// 2-3 round entry), samples summing to the global batch, equal rounds for stages 2-3.
// `assignment` and `entry` name the micro-batch at fault (-1 when no one entry is).
struct ScheduleFault {
  std::string reason;
  int assignment = -1;
  int entry = -1;
};
ScheduleFault FindScheduleFault(const StageProblem& problem, const Schedule& schedule);

// FindScheduleFault's reason alone: empty if `schedule` is valid for `problem`.
std::string ValidateSchedule(const StageProblem& problem, const Schedule& schedule);

}  // namespace poplar
