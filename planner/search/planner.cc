#include "planner/search/planner.h"

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
