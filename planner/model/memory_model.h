// ZeRO memory accounting (Rajbhandari et al., "ZeRO", SC'20, section 3 and 5) and the
// largest micro-batch a device can run for a stage in a cluster of a given size.
//
// Model states per rank for P parameters on N ranks (docs/cost-model.md, "Memory"):
//                 parameters     gradients      optimizer (Adam, incl. fp32 master)
//   fp32          4P             4P             8P
//   mixed         2P             2P             12P
//   stage 0       full           full           full
//   stage 1       full           full           1/N
//   stage 2       full           1/N            1/N
//   stage 3       1/N            1/N            1/N
// Partitions round up (ceil(P/N) parameters per rank). With uneven state shares
// (launcher/zero/flat_layout.h) a rank holding the fraction f of the sharded state pays
// ceil(f P) where the table says 1/N.
#pragma once

#include <cstdint>
#include <optional>

#include "planner/formats/precision.h"
#include "planner/formats/profile.h"

namespace poplar {

struct ModelStateBytes {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer = 0;
  std::int64_t Total() const { return parameters + gradients + optimizer; }
};

ModelStateBytes ModelStatesPerRank(std::int64_t params, int stage, int world_size, Precision precision);
// A rank that holds the fraction `share` (0 to 1) of the partitioned states.
ModelStateBytes ModelStatesForShare(std::int64_t params, int stage, double share, Precision precision);

// How one device type's memory is spent for one stage in a cluster of `world_size`
// ranks, derived from its profile (docs/cost-model.md, "Largest micro-batch").
struct MemoryFit {
  std::int64_t capacity_bytes = 0;
  std::int64_t model_state_bytes = 0;  // ModelStatesPerRank at world_size (or ForShare)
  std::int64_t fixed_bytes = 0;        // runtime overhead beyond model states
  std::int64_t activation_bytes_per_sample = 0;
  // The collectives' buffers at the most elements in flight the profile saw: N·f of them
  // in the working type, N ranks, the rank's share f (1/N even; Communicator::
  // elements_in_flight). The profile's peaks hold none.
  std::int64_t collective_bytes = 0;
  // What the worker holds while it builds the engine: the model whole in fp32 (it is made
  // on the device and then taken over) beside the rank's parameters and optimizer state,
  // and at stage 3 its gradient shard (ConstructionBytes).
  std::int64_t construction_bytes = 0;
  // Model states, fixed overhead and the collectives' buffers fit, and so does construction.
  bool states_fit = false;
  int max_micro_batch = 0;  // largest micro-batch that fits (0: none)

  std::int64_t BytesAt(int micro_batch) const {
    return model_state_bytes + fixed_bytes + collective_bytes + activation_bytes_per_sample * micro_batch;
  }
};

// The bytes a rank holds while the worker builds its engine (MemoryFit::construction_bytes).
std::int64_t ConstructionBytes(std::int64_t params, int stage, const ModelStateBytes& states);

// `share`: the device's fraction of the partitioned states (stages 1-3) when not 1/world_size.
MemoryFit FitMemory(const DeviceProfile& profile, const StageProfile& stage, int world_size,
                    std::optional<double> share = std::nullopt);

}  // namespace poplar
