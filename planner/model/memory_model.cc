#include "planner/model/memory_model.h"

#include <algorithm>
#include <cmath>

namespace poplar {
namespace {

// Upper bound on any micro-batch the planner considers, so that a profile with no
// activation growth cannot make the search unbounded.
constexpr int kLargestMicroBatch = 1 << 20;

// The states of a rank whose partitioned part is `owned` parameters.
ModelStateBytes StatesOwning(std::int64_t params, int stage, std::int64_t owned, Precision precision) {
  const std::int64_t working = BytesPerWorkingValue(precision);
  const std::int64_t optimizer = precision == Precision::kFp32 ? 8 : 12;
  ModelStateBytes bytes;
  bytes.parameters = working * (stage >= 3 ? owned : params);
  bytes.gradients = working * (stage >= 2 ? owned : params);
  bytes.optimizer = optimizer * (stage >= 1 ? owned : params);
  return bytes;
}

}  // namespace

ModelStateBytes ModelStatesPerRank(std::int64_t params, int stage, int world_size, Precision precision) {
  return StatesOwning(params, stage, (params + world_size - 1) / world_size, precision);
}

ModelStateBytes ModelStatesForShare(std::int64_t params, int stage, double share, Precision precision) {
  const double owned = std::ceil(static_cast<double>(params) * std::clamp(share, 0.0, 1.0));
  return StatesOwning(params, stage, static_cast<std::int64_t>(owned), precision);
}

std::int64_t ConstructionBytes(std::int64_t params, int stage, const ModelStateBytes& states) {
  return 4 * params + states.parameters + states.optimizer + (stage >= 3 ? states.gradients : 0);
}

MemoryFit FitMemory(const DeviceProfile& profile, const StageProfile& stage, int world_size,
                    std::optional<double> share) {
  // Least-squares line peak = base + slope * b over the measured points. With one point
  // the base is taken to be the model states alone.
  const Precision precision = profile.model.precision;
  const std::int64_t states_measured =
      (stage.state_share ? ModelStatesForShare(profile.model.params, stage.stage, *stage.state_share, precision)
                         : ModelStatesPerRank(profile.model.params, stage.stage, stage.world_size, precision))
          .Total();
  const auto& points = stage.points;
  double slope = 0;
  double base = 0;
  if (points.size() == 1) {
    slope = static_cast<double>(points[0].peak_bytes - states_measured) / points[0].micro_batch;
    base = static_cast<double>(states_measured);
  } else {
    double mean_b = 0, mean_m = 0;
    for (const auto& p : points) {
      mean_b += p.micro_batch;
      mean_m += static_cast<double>(p.peak_bytes);
    }
    mean_b /= points.size();
    mean_m /= points.size();
    double covariance = 0, variance = 0;
    for (const auto& p : points) {
      covariance += (p.micro_batch - mean_b) * (static_cast<double>(p.peak_bytes) - mean_m);
      variance += (p.micro_batch - mean_b) * (p.micro_batch - mean_b);
    }
    slope = covariance / variance;
    base = mean_m - slope * mean_b;
  }

  MemoryFit fit;
  fit.capacity_bytes = profile.memory_bytes;
  const ModelStateBytes states = share ? ModelStatesForShare(profile.model.params, stage.stage, *share, precision)
                                       : ModelStatesPerRank(profile.model.params, stage.stage, world_size, precision);
  fit.model_state_bytes = states.Total();
  fit.construction_bytes = ConstructionBytes(profile.model.params, stage.stage, states);
  fit.fixed_bytes = std::max<std::int64_t>(0, std::llround(base) - states_measured);
  fit.activation_bytes_per_sample = std::max<std::int64_t>(0, std::llround(slope));
  // N·f; a rank alone has no process group and no buffers.
  const double held = world_size <= 1 ? 0.0 : share ? std::clamp(*share, 0.0, 1.0) * world_size : 1.0;
  // (Clamped, so that absurd profile values cannot overflow the sums below: 2^62 bytes
  // fit on no device.)
  fit.collective_bytes = std::llround(std::min(0x1p62, static_cast<double>(stage.collective_elements_in_flight) * held *
                                                           static_cast<double>(BytesPerWorkingValue(precision))));
  const std::int64_t free_bytes = fit.capacity_bytes - fit.model_state_bytes - fit.fixed_bytes - fit.collective_bytes;
  fit.states_fit = free_bytes >= 0 && fit.construction_bytes <= fit.capacity_bytes;
  if (!fit.states_fit) return fit;

  // Two estimates of the cap at `world_size`; the smaller wins:
  //  - the memory model: what the free bytes hold at the fitted activation size;
  //  - the measured cap shifted by the bytes freed (or added) by moving from the
  //    profiling rank's states to this one's states and collectives' buffers.
  const std::int64_t freed = states_measured - fit.model_state_bytes - fit.collective_bytes;
  std::int64_t from_model = kLargestMicroBatch;
  std::int64_t from_measurement = stage.max_micro_batch;
  if (fit.activation_bytes_per_sample > 0) {
    from_model = free_bytes / fit.activation_bytes_per_sample;
    const std::int64_t shift =
        freed >= 0 ? freed / fit.activation_bytes_per_sample
                   : -((-freed + fit.activation_bytes_per_sample - 1) / fit.activation_bytes_per_sample);
    from_measurement = stage.max_micro_batch + shift;
  }
  fit.max_micro_batch =
      static_cast<int>(std::clamp<std::int64_t>(std::min(from_model, from_measurement), 0, kLargestMicroBatch));
  return fit;
}

}  // namespace poplar
