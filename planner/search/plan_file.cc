#include "planner/search/plan_file.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "planner/base/input_error.h"
#include "planner/formats/model_config.h"

namespace poplar {

using Json = nlohmann::ordered_json;

Json PredictionJson(const StepPrediction& prediction) {
  return {{"step_s", prediction.step_s},
          {"samples_per_s", prediction.samples_per_s},
          {"compute_s", prediction.compute_s},
          {"communication_s", prediction.communication_s},
          {"optimizer_s", prediction.optimizer_s}};
}

namespace {

// Device type -> index of its class in `problem`.
std::map<std::string, int> ClassIndex(const StageProblem& problem) {
  std::map<std::string, int> class_of;
  for (int c = 0; c < static_cast<int>(problem.classes.size()); ++c) class_of[problem.classes[c].type] = c;
  return class_of;
}

// Hands out each class's assignments, one device at a time, in order.
class AssignmentQueue {
 public:
  explicit AssignmentQueue(const Schedule& schedule) {
    for (const auto& assignment : schedule.assignments) {
      queues_[assignment.device_class].push_back({assignment.count, &assignment});
    }
  }
  const Assignment& Next(int device_class) {
    auto& queue = queues_.at(device_class);
    const Assignment* assignment = queue.front().second;
    if (--queue.front().first == 0) queue.pop_front();
    return *assignment;
  }

 private:
  std::map<int, std::deque<std::pair<int, const Assignment*>>> queues_;
};

// One entry of a plan's "ranks"; `device` ("cuda:1", "cpu:0") is left out when empty.
Json RankJson(int rank, const RankSlot& slot, const std::string& device, const std::vector<int>& micro_batches) {
  Json entry = {{"rank", rank}, {"host", slot.host}, {"node", slot.node}};
  if (!device.empty()) entry["device"] = device;
  entry["device_type"] = slot.device_type;
  entry["micro_batches"] = micro_batches;
  return entry;
}

// What the plan was made for: the parameter count and precision, and the model itself
// when the profiles recorded it (they agree: LoadClusterProfiles).
Json ModelJson(const StageProblem& problem, const std::map<std::string, DeviceProfile>& profiles) {
  Json model = {{"params", problem.params}, {"precision", PrecisionName(problem.precision)}};
  const auto& config = profiles.begin()->second.model.config;
  if (config) model["config"] = ModelConfigObject(*config);
  return model;
}

}  // namespace

Json PlacementPlanJson(const std::vector<RankSlot>& slots) {
  Json ranks = Json::array();
  for (const RankSlot& slot : slots) ranks.push_back(RankJson(static_cast<int>(ranks.size()), slot, "", {1}));
  return {{"stage", 0}, {"global_batch", ranks.size()}, {"ranks", std::move(ranks)}};
}

nlohmann::ordered_json PlanToJson(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                                  const PlanResult& result) {
  const StageOutcome& chosen = result.Chosen();
  const StageProblem& problem = chosen.problem;
  const std::map<std::string, int> class_of = ClassIndex(problem);

  Json ranks = Json::array();
  AssignmentQueue queue(chosen.schedule);
  int rank = 0;
  for (const RankSlot& slot : cluster.Ranks()) {
    const std::string kind = profiles.at(slot.device_type).emulated ? "cpu:" : "cuda:";
    const int device_class = class_of.at(slot.device_type);
    ranks.push_back(
        RankJson(rank++, slot, kind + std::to_string(slot.local_index), queue.Next(device_class).micro_batches));
    if (!problem.state_shares.empty()) ranks.back()["state_share"] = problem.state_shares[device_class];
  }

  Json device_types = Json::array();
  for (std::size_t c = 0; c < problem.classes.size(); ++c) {
    const DeviceClass& device_class = problem.classes[c];
    device_types.push_back({{"type", device_class.type},
                            {"count", device_class.count},
                            {"max_micro_batch", device_class.max_micro_batch},
                            {"memory_bytes", device_class.memory.capacity_bytes},
                            {"state_bytes", device_class.memory.model_state_bytes},
                            {"busy_s", chosen.prediction.classes[c].busy_s},
                            {"idle_s", chosen.prediction.classes[c].idle_s}});
  }

  Json stages = Json::array();
  for (const auto& outcome : result.stages) {
    Json entry = {{"stage", outcome.problem.stage}, {"feasible", outcome.feasible}};
    if (outcome.feasible) {
      entry["step_s"] = outcome.prediction.step_s;
      entry["samples_per_s"] = outcome.prediction.samples_per_s;
      entry["rounds"] = outcome.schedule.Rounds();
    } else {
      entry["reason"] = outcome.reason;
    }
    stages.push_back(std::move(entry));
  }

  return {{"format", kPlanFormat},
          {"stage", problem.stage},
          {"global_batch", problem.global_batch},
          {"policy", PolicyName(result.policy)},
          {"cluster", cluster.name},
          {"model", ModelJson(problem, profiles)},
          {"ranks", std::move(ranks)},
          {"predicted", PredictionJson(chosen.prediction)},
          {"device_types", std::move(device_types)},
          {"stages", std::move(stages)}};
}

void RequirePlanForCluster(const ClusterSpec& cluster, const WorkerPlan& plan) {
  if (plan.WorldSize() != cluster.DeviceCount()) {
    throw InputError(plan.file, "ranks",
                     "has " + std::to_string(plan.WorldSize()) + " ranks but " + cluster.file + " has " +
                         std::to_string(cluster.DeviceCount()) + " devices");
  }
  if (plan.global_batch != cluster.global_batch) {
    throw InputError(plan.file, "global_batch",
                     "is " + std::to_string(plan.global_batch) + " but " + cluster.file + " trains with " +
                         std::to_string(cluster.global_batch));
  }
  // A plan sizes micro-batches for one model's memory and speed: one made for another
  // model, or another precision, may not fit (a hand-written plan may say neither).
  if (plan.model_precision) {
    const auto precision = ParsePrecision(*plan.model_precision);
    if (!precision) {
      throw InputError(plan.file, "model.precision",
                       "must be fp32 or mixed (bf16 and fp16 mean mixed), got \"" + *plan.model_precision + "\"");
    }
    if (*precision != cluster.precision) {
      throw InputError(plan.file, "model.precision",
                       "is " + PrecisionName(*precision) + " but " + cluster.file + " trains in " +
                           PrecisionName(cluster.precision) + "; plan again (poplar plan)");
    }
  }
  if ((plan.model_params || plan.model_config) && cluster.job) {
    RequireJobModel(cluster, LoadJobModel(cluster).config, plan.file, plan.model_params, plan.model_config,
                    "plan for that model (poplar plan)");
  }
  // Ranks are numbered in cluster-file order; a plan that says otherwise was made for
  // another cluster, and would run (or be predicted) on devices it never meant.
  const std::vector<RankSlot> slots = cluster.Ranks();
  for (int rank = 0; rank < plan.WorldSize(); ++rank) {
    const RankPlacement& planned = plan.placement[rank];
    const RankSlot& slot = slots[rank];
    const std::string key = plan.RankKey(rank);
    if (!planned.device_type.empty() && planned.device_type != slot.device_type) {
      throw InputError(plan.file, key + ".device_type",
                       "is " + planned.device_type + " but rank " + std::to_string(rank) + " of " + cluster.file +
                           " has device type " + slot.device_type + " (ranks follow the cluster file's order)");
    }
    if (!planned.node.empty() && planned.node != slot.node) {
      throw InputError(plan.file, key + ".node",
                       "is '" + planned.node + "' but rank " + std::to_string(rank) + " of " + cluster.file +
                           " is on node '" + slot.node + "' (ranks follow the cluster file's order)");
    }
  }
}

namespace {

// The schedule a plan that fits `cluster` (RequirePlanForCluster) gives `problem`, built
// for plan.stage: rank r is the r-th device in cluster-file order, one assignment each.
// Throws InputError naming the plan's micro-batch a device cannot hold.
Schedule ScheduleOfPlan(const ClusterSpec& cluster, const StageProblem& problem, const WorkerPlan& plan) {
  if (plan.model_params && *plan.model_params != problem.params) {
    throw InputError(plan.file, "model.params",
                     "is " + std::to_string(*plan.model_params) + " but the profiles are of a model of " +
                         std::to_string(problem.params) + " parameters; plan with them (poplar plan)");
  }
  const std::map<std::string, int> class_of = ClassIndex(problem);
  Schedule schedule;
  schedule.stage = plan.stage;
  int rank = 0;
  for (const RankSlot& slot : cluster.Ranks()) {
    schedule.assignments.push_back({class_of.at(slot.device_type), 1, plan.micro_batches[rank++]});
  }
  // One assignment per rank, in rank order: a fault's assignment is its rank.
  const ScheduleFault fault = FindScheduleFault(problem, schedule);
  if (fault.entry >= 0) {
    throw InputError(plan.file, plan.RankKey(fault.assignment) + ".micro_batches[" + std::to_string(fault.entry) + "]",
                     fault.reason);
  }
  if (!fault.reason.empty()) throw InputError(plan.file, "ranks", "does not fit " + cluster.file + ": " + fault.reason);
  return schedule;
}

// The state shares of a plan that fits `cluster` as fractions per device class, in
// ClusterSpec::DeviceTypes() order (StageProblem::state_shares; empty for the even
// split). Throws InputError naming the plan's key when two ranks of one type differ.
std::vector<double> ClassSharesOfPlan(const ClusterSpec& cluster, const WorkerPlan& plan) {
  if (plan.state_shares.empty()) return {};
  double sum = 0;
  for (const double share : plan.state_shares) sum += share;
  const std::vector<std::string> types = cluster.DeviceTypes();
  std::vector<double> shares(types.size(), -1);
  std::vector<int> first(types.size(), -1);
  int rank = 0;
  for (const RankSlot& slot : cluster.Ranks()) {
    const auto c = static_cast<std::size_t>(std::find(types.begin(), types.end(), slot.device_type) - types.begin());
    const double share = plan.state_shares[rank] / sum;
    if (first[c] < 0) {
      first[c] = rank;
      shares[c] = share;
    } else if (std::abs(share - shares[c]) > 1e-12 * std::max(1.0, shares[c])) {
      throw InputError(plan.file, plan.RankKey(rank) + ".state_share",
                       "differs from rank " + std::to_string(first[c]) + "'s, of the same device type " +
                           slot.device_type + ": the cost model gives every device of a type one share");
    }
    ++rank;
  }
  return shares;
}

}  // namespace

StepPrediction PredictPlan(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                           const WorkerPlan& plan) {
  RequirePlanForCluster(cluster, plan);
  const StageProblem problem = BuildStageProblem(cluster, profiles, plan.stage, ClassSharesOfPlan(cluster, plan));
  if (!problem.feasible) {
    throw InputError(
        plan.file, "stage",
        "stage " + std::to_string(plan.stage) + " cannot run on " + cluster.file + ": " + problem.infeasible_reason);
  }
  return Simulate(problem, ScheduleOfPlan(cluster, problem, plan));
}

std::vector<double> PredictRankCompute(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                                       const WorkerPlan& plan) {
  RequirePlanForCluster(cluster, plan);
  const StageProblem problem = BuildStageProblem(cluster, profiles, plan.stage, ClassSharesOfPlan(cluster, plan));
  const std::map<std::string, int> class_of = ClassIndex(problem);
  std::vector<double> compute;
  for (const RankSlot& slot : cluster.Ranks()) {
    const DeviceClass& device_class = problem.classes.at(class_of.at(slot.device_type));
    double seconds = 0;
    for (const int size : plan.micro_batches.at(compute.size())) {
      if (size > 0) seconds += device_class.Time(size);
    }
    compute.push_back(seconds);
  }
  return compute;
}

Replan ReplanRunningJob(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                        const WorkerPlan& running, std::int64_t global_batch) {
  const ClusterSpec now = AtGlobalBatch(cluster, running.global_batch);
  const ClusterSpec next = AtGlobalBatch(cluster, global_batch > 0 ? global_batch : running.global_batch);
  RequirePlanForCluster(now, running);
  const std::vector<double> shares = ClassSharesOfPlan(now, running);
  const StageProblem running_problem = BuildStageProblem(now, profiles, running.stage, shares);
  StageOutcome outcome;
  outcome.problem = BuildStageProblem(next, profiles, running.stage, shares);
  for (const StageProblem* problem : {&running_problem, static_cast<const StageProblem*>(&outcome.problem)}) {
    if (!problem->feasible) {
      throw InputError(running.file, "stage",
                       "stage " + std::to_string(running.stage) + " cannot run on " + cluster.file + ": " +
                           problem->infeasible_reason);
    }
  }
  Replan replan;
  replan.running = Simulate(running_problem, ScheduleOfPlan(now, running_problem, running));
  const std::optional<Schedule> schedule = ScheduleFor(Policy::kPoplar, outcome.problem);
  if (!schedule) {
    throw InputError(running.file, "stage",
                     "no schedule of stage " + std::to_string(running.stage) + " fits a global batch of " +
                         std::to_string(next.global_batch) + " now");
  }
  outcome.feasible = true;
  outcome.schedule = *schedule;
  outcome.prediction = Simulate(outcome.problem, outcome.schedule);
  replan.prediction = outcome.prediction;
  PlanResult result;
  result.stages.push_back(std::move(outcome));
  result.chosen_stage = 0;
  replan.plan = PlanToJson(next, profiles, result);
  // The running plan's own share values: a switch keeps them exactly (RequireSwitchable).
  for (std::size_t rank = 0; rank < running.state_shares.size(); ++rank) {
    replan.plan["ranks"][rank]["state_share"] = running.state_shares[rank];
  }
  return replan;
}

}  // namespace poplar
