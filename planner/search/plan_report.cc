#include "planner/search/plan_report.h"

#include "planner/base/text_table.h"

namespace poplar {

std::string ClusterSummary(const ClusterSpec& cluster, const PlanResult& result) {
  const StageProblem& problem = result.stages.front().problem;
  return "cluster " + cluster.name + ": " + std::to_string(cluster.DeviceCount()) + " devices of " +
         std::to_string(cluster.DeviceTypes().size()) + " types on " + std::to_string(cluster.nodes.size()) +
         (cluster.nodes.size() == 1 ? " node" : " nodes") + "; global batch " + std::to_string(cluster.global_batch) +
         "; model " + Fixed(problem.params / 1e6, 1) + "M parameters (" + PrecisionName(problem.precision) +
         "); policy " + PolicyName(result.policy) + "; network " +
         (cluster.measured_network ? "measured (" + cluster.measured_network_file + ")" : "as declared") + "\n";
}

std::string StageTable(const PlanResult& result) {
  TextTable table({"stage", "step", "samples/s", "rounds", "note"}, {false, true, true, true, false});
  for (const auto& outcome : result.stages) {
    const int stage = outcome.problem.stage;
    const std::string label = std::to_string(stage) + (stage == result.chosen_stage ? " *" : "");
    if (!outcome.feasible) {
      table.AddRow({label, "-", "-", "-", outcome.reason});
      continue;
    }
    const bool rounds = outcome.problem.RoundsSynchronised();
    table.AddRow({label, Seconds(outcome.prediction.step_s), Fixed(outcome.prediction.samples_per_s, 1),
                  rounds ? std::to_string(outcome.schedule.Rounds()) : "-",
                  stage == result.chosen_stage ? "chosen" : ""});
  }
  return table.Render();
}

std::string ScheduleTable(const PlanResult& result) {
  const StageOutcome& chosen = result.Chosen();
  const StageProblem& problem = chosen.problem;
  TextTable table(
      {"device type", "devices", "memory", "states", "max mb", "micro-batches", "steps", "samples", "busy", "idle"},
      {false, true, true, true, true, false, true, true, true, true});
  for (const auto& assignment : chosen.schedule.assignments) {
    const DeviceClass& device_class = problem.classes[assignment.device_class];
    double busy = 0;
    int steps = 0;
    for (int micro_batch : assignment.micro_batches) {
      busy += device_class.Time(micro_batch);
      steps += micro_batch > 0 ? 1 : 0;
    }
    table.AddRow({device_class.type, std::to_string(assignment.count),
                  GiB(static_cast<double>(device_class.memory.capacity_bytes)),
                  GiB(static_cast<double>(device_class.memory.model_state_bytes)),
                  std::to_string(device_class.max_micro_batch), MicroBatchList(assignment.micro_batches),
                  std::to_string(steps), std::to_string(assignment.Samples()), Seconds(busy),
                  Seconds(chosen.prediction.compute_s - busy)});
  }
  return table.Render();
}

std::string PredictionLine(const StepPrediction& p) {
  return "predicted step " + Seconds(p.step_s) + " = compute " + Seconds(p.compute_s) + " + communication " +
         Seconds(p.communication_s) + " + optimizer " + Seconds(p.optimizer_s) + "; " + Fixed(p.samples_per_s, 1) +
         " samples/s\n";
}

// With uneven state shares: each class's share and what the even split would have
// allowed ("" for the even split).
std::string StateSplitLines(const PlanResult& result) {
  const StageProblem& problem = result.Chosen().problem;
  if (problem.state_shares.empty() || !result.Chosen().even_split) return "";
  const StageProblem& even = *result.Chosen().even_split;
  std::string lines = "state split (stage " + std::to_string(problem.stage) + "), uneven:";
  for (std::size_t c = 0; c < problem.classes.size(); ++c) {
    const DeviceClass& device_class = problem.classes[c];
    lines +=
        " " + device_class.type + " " + Fixed(100 * problem.state_shares[c], 2) + "% each (max mb " +
        std::to_string(device_class.max_micro_batch) + "; even split: " +
        (even.classes[c].memory.states_fit ? std::to_string(even.classes[c].max_micro_batch) : "states do not fit") +
        ")" + (c + 1 < problem.classes.size() ? ";" : "");
  }
  return lines + "\n";
}

std::string PlanReport(const ClusterSpec& cluster, const PlanResult& result) {
  return ClusterSummary(cluster, result) + "\n" + StageTable(result) + "\nschedule for stage " +
         std::to_string(result.chosen_stage) + ":\n" + ScheduleTable(result) + StateSplitLines(result) + "\n" +
         PredictionLine(result.Chosen().prediction);
}

}  // namespace poplar
