#include "test_problems.h"

#include <algorithm>

namespace poplar::testing {

DeviceClass MakeClass(std::string type, int count, int max_micro_batch, std::vector<std::pair<int, double>> points,
                      double optimizer_s) {
  DeviceClass device_class;
  device_class.type = std::move(type);
  device_class.count = count;
  device_class.max_micro_batch = max_micro_batch;
  device_class.compute = ComputeCurve(std::move(points));
  device_class.optimizer_s = optimizer_s;
  device_class.memory.states_fit = true;
  device_class.memory.max_micro_batch = max_micro_batch;
  return device_class;
}

StageProblem MakeProblem(int stage, std::int64_t global_batch, std::vector<DeviceClass> classes, double comm_per_step_s,
                         double comm_per_round_s) {
  StageProblem problem;
  problem.stage = stage;
  problem.global_batch = global_batch;
  problem.params = 1000;
  problem.classes = std::move(classes);
  problem.comm_per_step_s = comm_per_step_s;
  problem.comm_per_round_s = stage >= 2 ? comm_per_round_s : 0.0;
  for (const auto& device_class : problem.classes) {
    problem.optimizer_s = std::max(problem.optimizer_s, device_class.optimizer_s);
  }
  problem.feasible = true;
  return problem;
}

StageProblem RandomProblem(std::mt19937& rng, const RandomProblemOptions& options) {
  auto uniform = [&rng](int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng); };
  const int stage = options.stage >= 0 ? options.stage : uniform(0, 3);
  const int classes = uniform(1, options.max_classes);
  std::vector<DeviceClass> built;
  for (int c = 0; c < classes; ++c) {
    const bool zero_cap = options.allow_zero_cap && c > 0 && uniform(0, 5) == 0;
    const int cap = zero_cap ? 0 : uniform(1, options.max_cap);
    // Measured sizes: a random increasing subset of 1..cap+2, times that grow by random
    // quarter steps (0 allowed: flat parts and ties).
    std::vector<std::pair<int, double>> points;
    double time = 0.25 * uniform(1, 8);
    for (int size = 1; size <= options.max_cap + 2; ++size) {
      if (points.empty() || uniform(0, 2) == 0) points.emplace_back(size, time);
      time += 0.25 * uniform(0, 6);
    }
    built.push_back(MakeClass("type" + std::to_string(c), uniform(1, options.max_count), cap, std::move(points),
                              0.25 * uniform(0, 2)));
  }
  const double comm_step = 0.25 * uniform(0, 4);
  const double comm_round = 0.25 * uniform(0, 4);
  return MakeProblem(stage, uniform(1, options.max_batch), std::move(built), comm_step, comm_round);
}

}  // namespace poplar::testing
