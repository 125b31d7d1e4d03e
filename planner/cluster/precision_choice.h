// The precision the workers train in: the cluster file's training.precision resolved
// against its devices (docs/operations.md, "Precision"). `mixed` is bf16 where every
// device computes in bf16 (its profile's "bf16"; unknown counts as yes), else fp16 with
// dynamic loss scaling; `bf16` on a cluster with a device that has no bf16 is an error,
// never a silent slow or wrong run; `fp16` and `fp32` are taken as written.
#pragma once

#include <map>
#include <string>

#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"

namespace poplar {

struct WorkerPrecisionChoice {
  std::string name;    // poplar-worker --precision: fp32, bf16 or fp16
  std::string reason;  // why, as `poplar plan` and `poplar launch` say it
};

// `profiles` by device type. Throws InputError naming the cluster file's
// training.precision for bf16 asked of a device without it.
WorkerPrecisionChoice ChooseWorkerPrecision(const ClusterSpec& cluster,
                                            const std::map<std::string, DeviceProfile>& profiles);

}  // namespace poplar
