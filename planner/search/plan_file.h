// The plan file (docs/formats.md): the chosen stage and one entry per rank with its
// micro-batches, plus the prediction and the per-stage comparison.
//
// Ranks are numbered in cluster-file order: nodes in order, within a node its device
// groups in order. A rank's device is "cuda:<i>" (or "cpu:<i>" for an emulated device
// type), i counting the node's devices from 0.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"
#include "planner/formats/worker_plan.h"
#include "planner/search/planner.h"
#include "planner/search/schedule.h"
#include "planner/search/stage_problem.h"

namespace poplar {

nlohmann::ordered_json PlanToJson(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                                  const PlanResult& result);

// A plan that places one rank on every device and trains nothing to speak of (stage 0,
// one sample each), for jobs that need only the ranks: `poplar network`.
nlohmann::ordered_json PlacementPlanJson(const std::vector<RankSlot>& slots);

// {"step_s", "samples_per_s", "compute_s", "communication_s", "optimizer_s"}, as plan
// files give the prediction.
nlohmann::ordered_json PredictionJson(const StepPrediction& prediction);

// Throws InputError naming the plan file unless it was made for `cluster`: as many
// ranks as devices, the cluster's global batch, and each rank's device_type and node,
// where the plan gives them, those of the device in cluster-file order (the contract
// of docs/formats.md); and the model, where the plan records it: its precision the
// cluster's, its parameter count that of the cluster's job.model (when it has a job). `poplar launch --plan` and
// `simulate --plan` check this first.
void RequirePlanForCluster(const ClusterSpec& cluster, const WorkerPlan& plan);

// The cost model's prediction for a plan file on `cluster` with `profiles`, with its
// state shares. Throws InputError naming the plan file when it does not fit the cluster
// (RequirePlanForCluster), its stage cannot run there, a device cannot hold one of its
// micro-batches, or two ranks of one device type hold different state shares (the cost
// model gives a type one share). `simulate --plan` prints it; `launch --plan` checks a
// plan with it before starting.
StepPrediction PredictPlan(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                           const WorkerPlan& plan);

// Each rank's predicted compute for its micro-batches in `plan` (forward and backward,
// seconds: what its metrics' compute_s measures), from `profiles`, in rank order.
// Throws InputError as PredictPlan.
std::vector<double> PredictRankCompute(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                                       const WorkerPlan& plan);

// A plan that can replace `running` in its job (RequireSwitchable): the poplar policy's
// best schedule at `running`'s stage and state shares, on `cluster` with `profiles` that
// may have changed since it was made (a device measured slower than profiled), with its
// prediction beside the running plan's on the same profiles. The new plan trains
// `global_batch` samples a step (an adaptive batch's choice; 0: `running`'s); each plan
// is predicted at its own batch, whatever `cluster`'s (the batch the job started with).
// Throws InputError as PredictPlan, and when the stage has no schedule with those
// profiles.
struct Replan {
  nlohmann::ordered_json plan;  // a plan file, "predicted" included
  StepPrediction prediction;
  StepPrediction running;
};
Replan ReplanRunningJob(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                        const WorkerPlan& running, std::int64_t global_batch = 0);

}  // namespace poplar
