#include "planner/cluster/precision_choice.h"

#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/join.h"

namespace poplar {

WorkerPrecisionChoice ChooseWorkerPrecision(const ClusterSpec& cluster,
                                            const std::map<std::string, DeviceProfile>& profiles) {
  if (cluster.precision == Precision::kFp32) return {"fp32", "fp32, as " + cluster.file + " says"};
  std::vector<std::string> without;  // device types with no bf16
  for (const auto& [type, profile] : profiles) {
    if (profile.bf16 == false) without.push_back(type);
  }
  const std::string names = Join(without, ", ", [](const std::string& type) { return type; });
  if (cluster.precision_name == "fp16") {
    return {"fp16", "fp16 with dynamic loss scaling, as " + cluster.file + " says"};
  }
  if (cluster.precision_name == "bf16") {
    if (!without.empty()) {
      throw InputError(cluster.file, "training.precision",
                       "is bf16, but " + names + (without.size() == 1 ? " has" : " have") +
                           " no bf16 (NVIDIA GPUs before compute capability 8.0): write fp16, or mixed to choose");
    }
    return {"bf16", "bf16, as " + cluster.file + " says"};
  }
  if (without.empty()) return {"bf16", "bf16: every device computes in it"};
  return {"fp16", "fp16 with dynamic loss scaling: " + names + (without.size() == 1 ? " has" : " have") +
                      " no bf16 (NVIDIA GPUs before compute capability 8.0)"};
}

}  // namespace poplar
