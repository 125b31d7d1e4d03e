// Human-readable reports of a PlanResult for `poplar plan` and `poplar simulate`.
#pragma once

#include <string>

#include "planner/cluster/cluster.h"
#include "planner/search/planner.h"

namespace poplar {

// One line: the cluster, its size, the batch and the model.
std::string ClusterSummary(const ClusterSpec& cluster, const PlanResult& result);
// Every stage: predicted step time and throughput, or why it cannot run; the chosen
// stage is marked with '*'.
std::string StageTable(const PlanResult& result);
// The chosen stage's schedule, one row per group of devices with the same list:
// count, cap, micro-batches, accumulation steps, samples, busy and idle time.
std::string ScheduleTable(const PlanResult& result);
// With uneven state shares, each class's share and largest micro-batch beside the even
// split's ("" for the even split).
std::string StateSplitLines(const PlanResult& result);
// "Predicted step ...: compute + communication + optimizer, N samples/s".
std::string PredictionLine(const StepPrediction& prediction);
// All of the above, as `poplar plan` and `poplar simulate` print it.
std::string PlanReport(const ClusterSpec& cluster, const PlanResult& result);

}  // namespace poplar
