// StageProblem: everything the search and the simulator need to know about one ZeRO
// stage of one cluster, reduced to device classes (all devices of one type are one
// class), so that nothing downstream grows with the number of identical GPUs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"
#include "planner/model/compute_curve.h"
#include "planner/model/memory_model.h"

namespace poplar {

struct DeviceClass {
  std::string type;
  int count = 0;
  int max_micro_batch = 0;  // 0: holds model states but no sample fits
  ComputeCurve compute;     // seconds per micro-batch of a given size
  double optimizer_s = 0;   // one optimizer step on one device of this class
  MemoryFit memory;

  double Time(int micro_batch) const { return compute.Time(micro_batch); }
};

struct StageProblem {
  int stage = 0;
  std::int64_t global_batch = 0;
  std::int64_t params = 0;
  Precision precision = Precision::kMixed;
  std::vector<DeviceClass> classes;  // in the order of ClusterSpec::DeviceTypes()
  double comm_per_step_s = 0;
  double comm_per_round_s = 0;
  double optimizer_s = 0;  // slowest class's optimizer step (they run after a barrier)
  // Stages 1-3: each class's per-device fraction of the partitioned model states (the
  // plan's state_share), in class order; empty: the even split, 1/N each.
  std::vector<double> state_shares;
  bool feasible = false;
  std::string infeasible_reason;  // set when !feasible

  bool RoundsSynchronised() const { return stage >= 2; }
  int DeviceCount() const;
};

// Builds the problem for `stage`. Never throws for an infeasible stage: it is reported
// through `feasible` and `infeasible_reason` (no profile for the stage, model states
// that do not fit on some device, no device that can hold one sample).
// `state_shares` (stages 1-3, per class, as StageProblem::state_shares; empty: even)
// set each class's model states (ModelStatesForShare), its optimizer step (in proportion
// to the parameters it updates) and the collectives' pace (the largest slice's).
StageProblem BuildStageProblem(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                               int stage, const std::vector<double>& state_shares = {});

}  // namespace poplar
