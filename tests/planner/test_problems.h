// Builders of StageProblems for tests: by hand from struct literals, and at random.
#pragma once

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "planner/search/stage_problem.h"

namespace poplar::testing {

DeviceClass MakeClass(std::string type, int count, int max_micro_batch, std::vector<std::pair<int, double>> points,
                      double optimizer_s = 0.0);

StageProblem MakeProblem(int stage, std::int64_t global_batch, std::vector<DeviceClass> classes,
                         double comm_per_step_s = 0.0, double comm_per_round_s = 0.0);

struct RandomProblemOptions {
  int max_classes = 3;
  int max_count = 2;           // devices per class
  int max_cap = 4;             // largest micro-batch per class
  int max_batch = 8;           // global batch
  int stage = -1;              // -1: random stage 0..3
  bool allow_zero_cap = true;  // some classes may hold no sample
};

// Compute times are multiples of 1/4 so that ties are frequent and exact; curves may be
// concave, convex or flat in parts. Always feasible: at least one class has cap >= 1.
StageProblem RandomProblem(std::mt19937& rng, const RandomProblemOptions& options);

}  // namespace poplar::testing
