#include "planner/search/schedule.h"

#include <algorithm>
#include <numeric>

namespace poplar {

std::int64_t Assignment::Samples() const {
  return std::accumulate(micro_batches.begin(), micro_batches.end(), std::int64_t{0});
}

std::int64_t Schedule::TotalSamples() const {
  std::int64_t total = 0;
  for (const auto& assignment : assignments) total += assignment.count * assignment.Samples();
  return total;
}

int Schedule::Rounds() const {
  std::size_t rounds = 0;
  for (const auto& assignment : assignments) rounds = std::max(rounds, assignment.micro_batches.size());
  return static_cast<int>(rounds);
}

ScheduleFault FindScheduleFault(const StageProblem& problem, const Schedule& schedule) {
  if (schedule.stage != problem.stage) return {"schedule is for another stage"};
  std::vector<int> counts(problem.classes.size(), 0);
  const int rounds = schedule.Rounds();
  for (std::size_t a = 0; a < schedule.assignments.size(); ++a) {
    const Assignment& assignment = schedule.assignments[a];
    const int at = static_cast<int>(a);
    if (assignment.device_class < 0 || assignment.device_class >= static_cast<int>(problem.classes.size())) {
      return {"assignment names an unknown device class", at};
    }
    if (assignment.count <= 0) return {"assignment with no devices", at};
    counts[assignment.device_class] += assignment.count;
    const DeviceClass& device_class = problem.classes[assignment.device_class];
    for (std::size_t m = 0; m < assignment.micro_batches.size(); ++m) {
      const int micro_batch = assignment.micro_batches[m];
      const bool empty_round_entry = problem.RoundsSynchronised() && micro_batch == 0;
      if (!empty_round_entry && (micro_batch < 1 || micro_batch > device_class.max_micro_batch)) {
        return {"is " + std::to_string(micro_batch) + ", " +
                    (micro_batch > device_class.max_micro_batch ? "more than " + device_class.type + " holds"
                                                                : "no micro-batch of " + device_class.type) +
                    " at stage " + std::to_string(problem.stage) + " (allowed 1.." +
                    std::to_string(device_class.max_micro_batch) + ", by its profile)",
                at, static_cast<int>(m)};
      }
    }
    if (problem.RoundsSynchronised() && static_cast<int>(assignment.micro_batches.size()) != rounds) {
      return {"stage " + std::to_string(problem.stage) + " needs the same number of rounds on every device", at};
    }
  }
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] != problem.classes[i].count) {
      return {"schedule covers " + std::to_string(counts[i]) + " of " + std::to_string(problem.classes[i].count) + " " +
              problem.classes[i].type + " devices"};
    }
  }
  if (schedule.TotalSamples() != problem.global_batch) {
    return {"schedule has " + std::to_string(schedule.TotalSamples()) + " samples, global batch is " +
            std::to_string(problem.global_batch)};
  }
  return {};
}

std::string ValidateSchedule(const StageProblem& problem, const Schedule& schedule) {
  return FindScheduleFault(problem, schedule).reason;
}

}  // namespace poplar
