#include "planner/model/cost_model.h"

#include <algorithm>
#include <cmath>

namespace poplar {
namespace {

double UpdatedParams(int stage, std::int64_t params, double share) {
  if (stage == 0) return static_cast<double>(params);
  return std::ceil(static_cast<double>(params) * share);
}

}  // namespace

CollectiveParams TableCollectiveParams(int stage, std::int64_t params) {
  CollectiveParams moved;
  switch (stage) {
    case 0:
      moved.all_reduce_per_step = {params, 1};
      break;
    case 1:
      moved.reduce_scatter_per_step = {params, 1};
      moved.all_gather_per_step = {params, 1};
      break;
    case 2:
      moved.reduce_scatter_per_round = {params, 1};
      moved.all_gather_per_step = {params, 1};
      break;
    default:
      moved.all_gather_per_round = {2 * params, 2};
      moved.reduce_scatter_per_round = {params, 1};
      break;
  }
  return moved;
}

CollectiveUse ScalarAllReducesPerStep(int stage) {
  const int calls = stage == 0 ? 1 : 2;
  return {calls, calls};
}

StageCommunication CommunicationForStage(const CollectiveParams& moved, Precision precision,
                                         const CollectiveTimes& collectives, double slice_pace) {
  const double bytes = BytesPerWorkingValue(precision);
  auto time = [bytes](const CollectiveLine& line, const CollectiveUse& use, double pace) {
    return use.calls * line.fixed_s + pace * bytes * static_cast<double>(use.params) / line.payload_bytes_per_s;
  };
  StageCommunication comm;
  comm.per_step_s = time(collectives.all_reduce, moved.all_reduce_per_step, 1.0) +
                    time(collectives.reduce_scatter, moved.reduce_scatter_per_step, slice_pace) +
                    time(collectives.all_gather, moved.all_gather_per_step, slice_pace);
  comm.per_round_s = time(collectives.reduce_scatter, moved.reduce_scatter_per_round, slice_pace) +
                     time(collectives.all_gather, moved.all_gather_per_round, slice_pace);
  return comm;
}

double OptimizerSeconds(double profiled_step_s, double fixed_s, int stage, std::int64_t params, double profiled_share,
                        double share) {
  const double measured = UpdatedParams(stage, params, profiled_share);
  if (measured <= 0) return 0;
  const double fixed = std::clamp(fixed_s, 0.0, profiled_step_s);
  return fixed + (profiled_step_s - fixed) * UpdatedParams(stage, params, share) / measured;
}

}  // namespace poplar
