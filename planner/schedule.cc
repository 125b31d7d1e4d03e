#include "planner/schedule.h"

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

std::string ValidateSchedule(const StageProblem& problem, const Schedule& schedule) {
  if (schedule.stage != problem.stage) return "schedule is for another stage";
  std::vector<int> counts(problem.classes.size(), 0);
  const int rounds = schedule.Rounds();
  for (const auto& assignment : schedule.assignments) {
    if (assignment.device_class < 0 ||
        assignment.device_class >= static_cast<int>(problem.classes.size())) {
      return "assignment names an unknown device class";
    }
    if (assignment.count <= 0) return "assignment with no devices";
    counts[assignment.device_class] += assignment.count;
    const DeviceClass& device_class = problem.classes[assignment.device_class];
    for (int micro_batch : assignment.micro_batches) {
      const bool empty_round_entry = problem.RoundsSynchronised() && micro_batch == 0;
      if (!empty_round_entry && (micro_batch < 1 || micro_batch > device_class.max_micro_batch)) {
        return "micro-batch of " + std::to_string(micro_batch) + " on " + device_class.type +
               " (allowed 1.." + std::to_string(device_class.max_micro_batch) + ")";
      }
    }
    if (problem.RoundsSynchronised() && static_cast<int>(assignment.micro_batches.size()) != rounds) {
      return "stage " + std::to_string(problem.stage) +
             " needs the same number of rounds on every device";
    }
  }
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] != problem.classes[i].count) {
      return "schedule covers " + std::to_string(counts[i]) + " of " +
             std::to_string(problem.classes[i].count) + " " + problem.classes[i].type + " devices";
    }
  }
  if (schedule.TotalSamples() != problem.global_batch) {
    return "schedule has " + std::to_string(schedule.TotalSamples()) + " samples, global batch is " +
           std::to_string(problem.global_batch);
  }
  return "";
}

}  // namespace poplar
