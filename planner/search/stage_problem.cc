#include "planner/search/stage_problem.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "planner/model/cost_model.h"

namespace poplar {
namespace {

std::string Gibibytes(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

// A micro-batch's compute by size. A one-rank job replays its micro-batches from CUDA
// graphs where the profile timed that (stages 0-1 on a GPU, ProfilePoint::
// graph_compute_s; no collective inside them then); every other job runs them eagerly.
ComputeCurve CurveOf(const StageProfile& stage, int ranks) {
  std::vector<std::pair<int, double>> points;
  for (const auto& point : stage.points) {
    const bool replayed = ranks == 1 && stage.stage <= 1 && point.graph_compute_s > 0;
    points.emplace_back(point.micro_batch, replayed ? point.graph_compute_s : point.compute_s);
  }
  return ComputeCurve(std::move(points));
}

// What the stage moves: the worker's own schedule as the profiles record it (the larger,
// should two profiles of the model disagree), else the cost model's table.
CollectiveParams MovedByStage(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                              int stage, std::int64_t params) {
  std::optional<CollectiveParams> recorded;
  for (const auto& type : cluster.DeviceTypes()) {
    const StageProfile* measured = profiles.at(type).Stage(stage);
    if (!measured || !measured->collectives) continue;
    if (!recorded) {
      recorded = measured->collectives;
      continue;
    }
    for (const auto& [key, field] : kCollectiveParamsFields) {
      CollectiveUse& mine = (*recorded).*field;
      const CollectiveUse& theirs = (*measured->collectives).*field;
      mine = {std::max(mine.params, theirs.params), std::max(mine.calls, theirs.calls)};
    }
  }
  return recorded ? *recorded : TableCollectiveParams(stage, params);
}

}  // namespace

int StageProblem::DeviceCount() const {
  int total = 0;
  for (const auto& device_class : classes) total += device_class.count;
  return total;
}

StageProblem BuildStageProblem(const ClusterSpec& cluster, const std::map<std::string, DeviceProfile>& profiles,
                               int stage, const std::vector<double>& state_shares) {
  StageProblem problem;
  problem.stage = stage;
  const bool uneven = stage >= 1 && !state_shares.empty();
  if (uneven) problem.state_shares = state_shares;
  problem.global_batch = cluster.global_batch;
  problem.precision = cluster.precision;
  const int ranks = cluster.DeviceCount();
  std::map<std::string, int> counts;
  for (const auto& node : cluster.nodes) {
    for (const auto& group : node.devices) counts[group.type] += group.count;
  }

  std::string reason;
  bool any_sample_fits = false;
  for (const auto& type : cluster.DeviceTypes()) {
    const DeviceProfile& profile = profiles.at(type);
    problem.params = profile.model.params;
    const StageProfile* measured = profile.Stage(stage);
    if (!measured) {
      if (reason.empty()) reason = "profile " + profile.file + " has no stage " + std::to_string(stage);
      continue;
    }
    DeviceClass device_class;
    device_class.type = type;
    device_class.count = counts[type];
    const std::size_t index = problem.classes.size();
    const std::optional<double> share =
        uneven ? std::optional<double>(state_shares.at(index)) : std::optional<double>();
    device_class.memory = FitMemory(profile, *measured, ranks, share);
    device_class.max_micro_batch =
        static_cast<int>(std::min<std::int64_t>(device_class.memory.max_micro_batch, cluster.global_batch));
    device_class.compute = CurveOf(*measured, ranks);
    device_class.optimizer_s =
        OptimizerSeconds(measured->optimizer_step_s, measured->optimizer_fixed_s.value_or(0), stage,
                         profile.model.params, measured->HeldShare(), share ? *share : 1.0 / ranks);
    const MemoryFit& memory = device_class.memory;
    if (!memory.states_fit && reason.empty() && memory.construction_bytes > memory.capacity_bytes) {
      reason = "building the engine (the model whole in fp32 beside the rank's states: " +
               Gibibytes(memory.construction_bytes) + ") does not fit on " + type + " (" +
               Gibibytes(memory.capacity_bytes) + ")";
    }
    if (!memory.states_fit && reason.empty()) {
      reason = "model states (" + Gibibytes(memory.model_state_bytes) + " per rank)";
      if (memory.fixed_bytes > 0) {  // the rest of what the profile's peaks say is always in use
        reason += " and the fixed overhead the peak_bytes of " + profile.file + " imply (" +
                  Gibibytes(memory.fixed_bytes) + ")";
      }
      if (memory.collective_bytes > 0) {
        reason += " and the buffers of the collectives in flight (" + Gibibytes(memory.collective_bytes) + ")";
      }
      reason += " do not fit on " + type + " (" + Gibibytes(memory.capacity_bytes) + ")";
    }
    any_sample_fits = any_sample_fits || device_class.max_micro_batch > 0;
    problem.optimizer_s = std::max(problem.optimizer_s, device_class.optimizer_s);
    problem.classes.push_back(std::move(device_class));
  }
  if (reason.empty() && !any_sample_fits) reason = "no device has memory for one sample";

  if (ranks > 1) {
    CollectiveParams moved = MovedByStage(cluster, profiles, stage, problem.params);
    const CollectiveUse scalars = ScalarAllReducesPerStep(stage);
    moved.all_reduce_per_step.params += scalars.params;
    moved.all_reduce_per_step.calls += scalars.calls;
    double pace = 1.0;
    if (uneven) pace = ranks * *std::max_element(state_shares.begin(), state_shares.end());
    const StageCommunication comm =
        CommunicationForStage(moved, problem.precision, cluster.Collectives(), std::max(1.0, pace));
    problem.comm_per_step_s = comm.per_step_s;
    problem.comm_per_round_s = comm.per_round_s;
  }
  problem.feasible = reason.empty();
  problem.infeasible_reason = reason;
  return problem;
}

}  // namespace poplar
