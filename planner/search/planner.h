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
  // With uneven state shares (problem.state_shares): the even split's problem, with the
  // same classes, for reports of what the split changed.
  std::optional<StageProblem> even_split;
};

struct PlanResult {
  Policy policy = Policy::kPoplar;
  std::vector<StageOutcome> stages;  // stages 0..3 in order
  int chosen_stage = -1;             // -1: no stage is feasible

  const StageOutcome& Chosen() const { return stages.at(chosen_stage); }
};

// The schedule `policy` gives for one stage, or nullopt if it has none.
std::optional<Schedule> ScheduleFor(Policy policy, const StageProblem& problem);

// Uneven state shares (the poplar policy, stages 1-3, unless the cluster file says
// training.state_split: even): each device class holds k/kStateShareGrid of the
// partitioned model states, split evenly among its devices, k >= 0 summing to the
// grid. Every point of the grid is searched exactly (SearchSchedule under the class's
// memory cap, optimizer share and the largest slice's collective pace:
// BuildStageProblem), and the best is kept where it predicts a shorter step than the
// even split (ties keep it even). The grid has C(kStateShareGrid + k - 1, k - 1)
// points for k classes: clusters of more than kMostStateShareClasses device types
// search instead the splits in which the classes with the least memory hold nothing and
// the others hold the state evenly per device (one split per distinct memory size but
// the largest), each exactly, against the even split as above.
inline constexpr int kStateShareGrid = 64;
inline constexpr int kMostStateShareClasses = 3;

// Evaluates stages 0..3 (or only cluster.stage when fixed) and chooses the one with
// the smallest predicted step time; ties go to the lower stage. Throws InputError
// naming the cluster file when no stage can run.
PlanResult MakePlan(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles, Policy policy);

}  // namespace poplar
