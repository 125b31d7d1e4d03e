// How the ranks of a job divide a held-out evaluation (the worker's --eval-data) among
// themselves: in proportion to their share of the training batch, which the planner
// made proportional to each device's speed, so that the evaluation is balanced as a
// training step is. Each rank goes through its share at its largest planned micro-batch;
// the rounds are the most any rank needs, so a device the plan gives small micro-batches
// (little memory) sets their number, as its rounds do in training. Torch-free, so that
// it is tested alone.
#pragma once

#include <cstdint>

#include "planner/formats/worker_plan.h"

namespace poplar {

// Rank `rank`'s part of an evaluation of samples 0..samples-1: the contiguous range
// [samples * offset / B, samples * (offset + n) / B) for its offset and its n samples of
// the global batch B (WorkerPlan::RankOffset, RankSamples), so that the ranks' ranges
// cover every sample once, in rank order. It evaluates them `micro_batch` at a time, its
// largest planned micro-batch (one that fits in training fits in a forward without
// gradients), in `rounds` rounds: the most any rank needs, so that every rank makes the
// same number of calls (at stage 3 each round gathers the parameters on every rank).
struct EvalShare {
  std::int64_t first = 0;   // the first sample
  std::int64_t count = 0;   // samples; 0 for a rank with no samples in the plan
  int micro_batch = 0;      // samples per round; 0 when count is 0
  std::int64_t rounds = 0;  // the same on every rank
};
EvalShare EvalShareOf(const WorkerPlan& plan, int rank, std::int64_t samples);

}  // namespace poplar
