#include "planner/search/simulator.h"

#include <algorithm>

namespace poplar {
namespace {

double BusySeconds(const StageProblem& problem, const Assignment& assignment) {
  const DeviceClass& device_class = problem.classes[assignment.device_class];
  double busy = 0;
  for (int micro_batch : assignment.micro_batches) busy += device_class.Time(micro_batch);
  return busy;
}

double ComputePhaseSeconds(const StageProblem& problem, const Schedule& schedule) {
  double phase = 0;
  if (!problem.RoundsSynchronised()) {
    for (const auto& assignment : schedule.assignments) {
      phase = std::max(phase, BusySeconds(problem, assignment));
    }
    return phase;
  }
  for (int round = 0; round < schedule.Rounds(); ++round) {
    double slowest = 0;
    for (const auto& assignment : schedule.assignments) {
      const DeviceClass& device_class = problem.classes[assignment.device_class];
      slowest = std::max(slowest, device_class.Time(assignment.micro_batches[round]));
    }
    phase += slowest;
  }
  return phase;
}

}  // namespace

StepPrediction Simulate(const StageProblem& problem, const Schedule& schedule) {
  StepPrediction prediction;
  prediction.compute_s = ComputePhaseSeconds(problem, schedule);
  prediction.communication_s = problem.comm_per_step_s;
  if (problem.RoundsSynchronised()) {
    prediction.communication_s += schedule.Rounds() * problem.comm_per_round_s;
  }
  prediction.optimizer_s = problem.optimizer_s;
  prediction.step_s = prediction.compute_s + prediction.communication_s + prediction.optimizer_s;
  prediction.samples_per_s = prediction.step_s > 0 ? static_cast<double>(problem.global_batch) / prediction.step_s : 0;

  prediction.classes.resize(problem.classes.size());
  for (const auto& assignment : schedule.assignments) {
    const double busy = BusySeconds(problem, assignment);
    const double share = static_cast<double>(assignment.count) / problem.classes[assignment.device_class].count;
    ClassUsage& usage = prediction.classes[assignment.device_class];
    usage.busy_s += share * busy;
    usage.idle_s += share * (prediction.compute_s - busy);
  }
  return prediction;
}

}  // namespace poplar
