#include "planner/search/planner.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "planner/base/input_error.h"
#include "planner/search/baselines.h"
#include "planner/search/search.h"

namespace poplar {

std::optional<Policy> ParsePolicy(const std::string& text) {
  if (text == "poplar") return Policy::kPoplar;
  if (text == "uniform") return Policy::kUniform;
  if (text == "proportional") return Policy::kProportional;
  return std::nullopt;
}

std::string PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kPoplar:
      return "poplar";
    case Policy::kUniform:
      return "uniform";
    default:
      return "proportional";
  }
}

std::optional<Schedule> ScheduleFor(Policy policy, const StageProblem& problem) {
  switch (policy) {
    case Policy::kPoplar:
      return SearchSchedule(problem);
    case Policy::kUniform:
      return UniformSchedule(problem);
    default:
      return ProportionalSchedule(problem);
  }
}

namespace {

// Calls `visit` with every way of giving `classes` classes k_c >= 0 parts of
// kStateShareGrid, in lexicographic order.
void ForEachSplit(int classes, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> parts(classes, 0);
  std::function<void(int, int)> place = [&](int c, int left) {
    if (c + 1 == classes) {
      parts[c] = left;
      visit(parts);
      return;
    }
    for (int k = 0; k <= left; ++k) {
      parts[c] = k;
      place(c + 1, left - k);
    }
  };
  place(0, kStateShareGrid);
}

// Calls `visit` with the per-device shares of every split in which the device classes
// with the least memory hold nothing and the rest hold the state evenly per device: one
// split per distinct memory size but the largest (planner.h, kMostStateShareClasses).
void ForEachHolderSplit(const std::vector<DeviceClass>& classes,
                        const std::function<void(const std::vector<double>&)>& visit) {
  std::vector<std::int64_t> sizes;
  for (const DeviceClass& device_class : classes) sizes.push_back(device_class.memory.capacity_bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (std::size_t below = 0; below + 1 < sizes.size(); ++below) {
    int holders = 0;
    for (const DeviceClass& device_class : classes) {
      if (device_class.memory.capacity_bytes > sizes[below]) holders += device_class.count;
    }
    std::vector<double> shares;
    for (const DeviceClass& device_class : classes) {
      shares.push_back(device_class.memory.capacity_bytes > sizes[below] ? 1.0 / holders : 0.0);
    }
    visit(shares);
  }
}

// The most samples per second a device of one class computes in micro-batches of at
// most b samples: max over b' <= b of b' / Time(b'), grown on demand.
class BestRate {
 public:
  double At(const DeviceClass& device_class, int b) {
    while (static_cast<int>(best_.size()) <= b) {
      const int next = static_cast<int>(best_.size());
      const double time = device_class.Time(next);
      best_.push_back(std::max(best_.back(), time > 0 ? next / time : 0.0));
    }
    return best_[b];
  }

 private:
  std::vector<double> best_ = {0.0};
};

// No schedule of `problem` predicts a shorter step: a device of class c computes at
// most BestRate(cap_c) samples a second, so the compute phase takes at least B / sum of
// count_c BestRate(cap_c) (at stages 2-3 too: each round's slowest device bounds its
// samples alike), and stages 2-3 pay at least one round's communication.
double StepLowerBound(const StageProblem& problem, std::vector<BestRate>& best_rate) {
  double rate = 0;
  for (std::size_t c = 0; c < problem.classes.size(); ++c) {
    const DeviceClass& device_class = problem.classes[c];
    rate += device_class.count * best_rate[c].At(device_class, device_class.max_micro_batch);
  }
  const double compute = rate > 0 ? static_cast<double>(problem.global_batch) / rate : 0.0;
  return compute + problem.comm_per_step_s + (problem.RoundsSynchronised() ? problem.comm_per_round_s : 0.0) +
         problem.optimizer_s;
}

// The best uneven split of `even`'s stage over the grid (planner.h), if one predicts a
// shorter step than `even` (or `even` cannot run); nullopt otherwise.
std::optional<StageOutcome> BestUnevenSplit(const ClusterSpec& cluster,
                                            const std::map<std::string, DeviceProfile>& profiles,
                                            const StageOutcome& even) {
  const auto& classes = even.problem.classes;
  if (even.problem.stage == 0 || !cluster.uneven_state_split || cluster.DeviceCount() < 2 || classes.size() < 2 ||
      classes.size() != cluster.DeviceTypes().size()) {
    return std::nullopt;
  }
  std::optional<StageOutcome> best;
  // A split whose lower bound cannot beat the best step so far (the even split's, at
  // first) is not searched.
  double to_beat = even.feasible ? even.prediction.step_s : std::numeric_limits<double>::infinity();
  std::vector<BestRate> best_rate(classes.size());
  const auto consider = [&](const std::vector<double>& shares) {
    StageProblem problem = BuildStageProblem(cluster, profiles, even.problem.stage, shares);
    if (!problem.feasible || StepLowerBound(problem, best_rate) >= to_beat) return;
    std::optional<Schedule> schedule = SearchSchedule(problem);
    if (!schedule) return;
    const StepPrediction prediction = Simulate(problem, *schedule);
    if (prediction.step_s >= to_beat) return;
    to_beat = prediction.step_s;
    best = StageOutcome{std::move(problem), true, "", std::move(*schedule), prediction, even.problem};
  };
  if (classes.size() > static_cast<std::size_t>(kMostStateShareClasses)) {
    ForEachHolderSplit(classes, consider);
  } else {
    ForEachSplit(static_cast<int>(classes.size()), [&](const std::vector<int>& parts) {
      std::vector<double> shares;
      for (std::size_t c = 0; c < classes.size(); ++c) {
        shares.push_back(parts[c] / (static_cast<double>(kStateShareGrid) * classes[c].count));
      }
      consider(shares);
    });
  }
  // Ties keep the even split.
  if (!best || (even.feasible && best->prediction.step_s >= even.prediction.step_s * (1 - 1e-9))) return std::nullopt;
  return best;
}

}  // namespace

PlanResult MakePlan(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles, Policy policy) {
  PlanResult result;
  result.policy = policy;
  for (int stage = 0; stage <= 3; ++stage) {
    StageOutcome outcome;
    outcome.problem = BuildStageProblem(cluster, profiles, stage);
    if (cluster.stage && *cluster.stage != stage) {
      outcome.reason = "the cluster file fixes stage " + std::to_string(*cluster.stage);
    } else if (!outcome.problem.feasible) {
      outcome.reason = outcome.problem.infeasible_reason;
    } else if (auto schedule = ScheduleFor(policy, outcome.problem)) {
      outcome.feasible = true;
      outcome.schedule = std::move(*schedule);
      outcome.prediction = Simulate(outcome.problem, outcome.schedule);
    } else {
      outcome.reason = "the " + PolicyName(policy) + " policy has no schedule for this stage";
    }
    if (policy == Policy::kPoplar && (!cluster.stage || *cluster.stage == stage)) {
      if (auto uneven = BestUnevenSplit(cluster, profiles, outcome)) outcome = std::move(*uneven);
    }
    const bool better =
        outcome.feasible && (result.chosen_stage < 0 || outcome.prediction.step_s < result.Chosen().prediction.step_s);
    result.stages.push_back(std::move(outcome));
    if (better) result.chosen_stage = stage;
  }
  if (result.chosen_stage < 0) {
    std::string reasons;
    for (const auto& outcome : result.stages) {
      if (cluster.stage && outcome.problem.stage != *cluster.stage) continue;
      reasons += "; stage " + std::to_string(outcome.problem.stage) + ": " + outcome.reason;
    }
    throw InputError(cluster.file, cluster.stage ? "training.stage" : "nodes",
                     "no ZeRO stage can train this model on these devices" + reasons);
  }
  return result;
}

}  // namespace poplar
