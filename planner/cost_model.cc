#include "planner/cost_model.h"

namespace poplar {
namespace {

double UpdatedParams(int stage, std::int64_t params, int world_size) {
  if (stage == 0) return static_cast<double>(params);
  return static_cast<double>((params + world_size - 1) / world_size);
}

}  // namespace

StageCommunication CommunicationForStage(int stage, std::int64_t params, Precision precision,
                                         const CollectiveTimes& collectives) {
  const double bytes = static_cast<double>(params) * BytesPerWorkingValue(precision);
  StageCommunication comm;
  switch (stage) {
    case 0:
      comm.per_step_s = collectives.all_reduce.Seconds(bytes);
      break;
    case 1:
      comm.per_step_s = collectives.reduce_scatter.Seconds(bytes) +
                        collectives.all_gather.Seconds(bytes);
      break;
    case 2:
      comm.per_round_s = collectives.reduce_scatter.Seconds(bytes);
      comm.per_step_s = collectives.all_gather.Seconds(bytes);
      break;
    default:
      comm.per_round_s = 2.0 * collectives.all_gather.Seconds(bytes) +
                         collectives.reduce_scatter.Seconds(bytes);
      break;
  }
  return comm;
}

double OptimizerSeconds(double profiled_step_s, int stage, std::int64_t params,
                        int profiled_world_size, int world_size) {
  const double measured = UpdatedParams(stage, params, profiled_world_size);
  return profiled_step_s * UpdatedParams(stage, params, world_size) / measured;
}

}  // namespace poplar
