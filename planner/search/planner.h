// The planner's front door: for a cluster and its profiles, evaluate every ZeRO stage
// under a policy and pick the fastest (or the stage the cluster file fixes).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"
#include "planner/search/schedule.h"
#include "planner/search/simulator.h"
#include "planner/search/stage_problem.h"

namespace poplar {

enum class Policy { kPoplar, kUniform, kProportional };

std::optional<Policy> ParsePolicy(const std::string& text);
std::string PolicyName(Policy policy);

struct StageOutcome {
  StageProblem problem;
  bool feasible = false;
  std::string reason;  // why not, when !feasible
  Schedule schedule;
  StepPrediction prediction;
};

struct PlanResult {
  Policy policy = Policy::kPoplar;
  std::vector<StageOutcome> stages;  // stages 0..3 in order
  int chosen_stage = -1;             // -1: no stage is feasible

  const StageOutcome& Chosen() const { return stages.at(chosen_stage); }
};

// The schedule `policy` gives for one stage, or nullopt if it has none.
std::optional<Schedule> ScheduleFor(Policy policy, const StageProblem& problem);

// Evaluates stages 0..3 (or only cluster.stage when fixed) and chooses the one with
// the smallest predicted step time; ties go to the lower stage. Throws InputError
// naming the cluster file when no stage can run.
PlanResult MakePlan(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles, Policy policy);

}  // namespace poplar
