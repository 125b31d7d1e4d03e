#include "planner/search/baselines.h"

#include <algorithm>

#include "planner/search/allocation.h"

namespace poplar {
namespace {

// Appends the assignments of one class whose devices share `class_total` samples as
// evenly as possible, each device splitting its samples into `parts(samples)` near-equal
// micro-batches (zeros dropped at stages 0-1).
template <typename PartsOf>
void AppendSplit(const StageProblem& problem, int device_class, std::int64_t class_total, PartsOf parts,
                 Schedule& schedule) {
  const int count = problem.classes[device_class].count;
  for (const Assignment& spread : SpreadOverClass(device_class, count, {class_total}, true)) {
    const std::int64_t samples = spread.Samples();
    Assignment assignment{device_class, spread.count, SplitEvenly(samples, parts(samples))};
    if (!problem.RoundsSynchronised()) {
      auto& list = assignment.micro_batches;
      list.erase(std::remove(list.begin(), list.end(), 0), list.end());
    }
    schedule.assignments.push_back(std::move(assignment));
  }
}

}  // namespace

std::optional<Schedule> UniformSchedule(const StageProblem& problem) {
  if (!problem.feasible) return std::nullopt;
  std::int64_t smallest_cap = problem.global_batch;
  for (const auto& device_class : problem.classes) {
    smallest_cap = std::min<std::int64_t>(smallest_cap, device_class.max_micro_batch);
  }
  if (smallest_cap <= 0) return std::nullopt;
  const std::int64_t devices = problem.DeviceCount();
  const std::int64_t batch = problem.global_batch;
  const int accumulation = static_cast<int>((batch + smallest_cap * devices - 1) / (smallest_cap * devices));

  // Device d (in class order) takes B/N samples, +1 for the first B mod N devices.
  Schedule schedule;
  schedule.stage = problem.stage;
  std::int64_t first_device = 0;
  for (int c = 0; c < static_cast<int>(problem.classes.size()); ++c) {
    const std::int64_t count = problem.classes[c].count;
    const std::int64_t extra = std::clamp<std::int64_t>(batch % devices - first_device, 0, count);
    AppendSplit(
        problem, c, count * (batch / devices) + extra, [accumulation](std::int64_t) { return accumulation; }, schedule);
    first_device += count;
  }
  return schedule;
}

std::optional<Schedule> ProportionalSchedule(const StageProblem& problem) {
  if (!problem.feasible) return std::nullopt;
  std::vector<double> weights;
  std::vector<std::int64_t> limits;
  for (const auto& device_class : problem.classes) {
    const int cap = device_class.max_micro_batch;
    const double speed = cap > 0 ? cap / device_class.Time(cap) : 0.0;
    weights.push_back(speed * device_class.count);
    limits.push_back(cap > 0 ? problem.global_batch : 0);
  }
  const std::vector<std::int64_t> shares = ShareByWeight(problem.global_batch, weights, limits);

  int rounds = 1;
  for (std::size_t c = 0; c < shares.size(); ++c) {
    const DeviceClass& device_class = problem.classes[c];
    if (device_class.max_micro_batch == 0) continue;
    const std::int64_t most = (shares[c] + device_class.count - 1) / device_class.count;
    rounds = std::max<int>(rounds,
                           static_cast<int>((most + device_class.max_micro_batch - 1) / device_class.max_micro_batch));
  }
  Schedule schedule;
  schedule.stage = problem.stage;
  for (int c = 0; c < static_cast<int>(shares.size()); ++c) {
    const int cap = std::max(1, problem.classes[c].max_micro_batch);
    const bool rounds_synchronised = problem.RoundsSynchronised();
    AppendSplit(
        problem, c, shares[c],
        [=](std::int64_t samples) {
          return rounds_synchronised ? rounds : static_cast<int>((samples + cap - 1) / cap);
        },
        schedule);
  }
  return schedule;
}

}  // namespace poplar
