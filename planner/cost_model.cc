#include "planner/cost_model.h"

namespace poplar {
namespace {

double RingPass(double bytes, int ranks, const LinkSpec& link) {
  if (ranks <= 1) return 0.0;
  const double steps = ranks - 1;
  return steps / ranks * bytes / link.bandwidth_bytes_per_s + steps * link.latency_s;
}

double UpdatedParams(int stage, std::int64_t params, int world_size) {
  if (stage == 0) return static_cast<double>(params);
  return static_cast<double>((params + world_size - 1) / world_size);
}

}  // namespace

double RingAllReduceSeconds(double bytes, int ranks, const LinkSpec& link) {
  return 2.0 * RingPass(bytes, ranks, link);
}

double RingReduceScatterSeconds(double bytes, int ranks, const LinkSpec& link) {
  return RingPass(bytes, ranks, link);
}

double RingAllGatherSeconds(double bytes, int ranks, const LinkSpec& link) {
  return RingPass(bytes, ranks, link);
}

StageCommunication CommunicationForStage(int stage, std::int64_t params, Precision precision,
                                         int ranks, const LinkSpec& link) {
  const double bytes = static_cast<double>(params) * BytesPerWorkingValue(precision);
  StageCommunication comm;
  switch (stage) {
    case 0:
      comm.per_step_s = RingAllReduceSeconds(bytes, ranks, link);
      break;
    case 1:
      comm.per_step_s = RingReduceScatterSeconds(bytes, ranks, link) +
                        RingAllGatherSeconds(bytes, ranks, link);
      break;
    case 2:
      comm.per_round_s = RingReduceScatterSeconds(bytes, ranks, link);
      comm.per_step_s = RingAllGatherSeconds(bytes, ranks, link);
      break;
    default:
      comm.per_round_s = 2.0 * RingAllGatherSeconds(bytes, ranks, link) +
                         RingReduceScatterSeconds(bytes, ranks, link);
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
