#include "planner/formats/eval_share.h"

#include <algorithm>

namespace poplar {
namespace {

struct Range {
  std::int64_t first = 0;
  std::int64_t count = 0;
  int micro_batch = 0;
};

Range RangeOf(const WorkerPlan& plan, int rank, std::int64_t samples) {
  const std::int64_t batch = plan.global_batch;
  const std::int64_t offset = plan.RankOffset(rank);
  // samples * (offset + n) stays far inside int64: samples of a token file (< 2^62 /
  // block size) times a batch of at most kMostGlobalBatch would not, so divide first.
  const auto part = [&](std::int64_t at) { return samples / batch * at + samples % batch * at / batch; };
  Range range;
  range.first = part(offset);
  range.count = part(offset + plan.RankSamples(rank)) - range.first;
  const std::vector<int>& sizes = plan.micro_batches[rank];
  range.micro_batch = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  if (range.micro_batch == 0) range.count = 0;  // no samples in the plan: none here
  return range;
}

}  // namespace

EvalShare EvalShareOf(const WorkerPlan& plan, int rank, std::int64_t samples) {
  const Range own = RangeOf(plan, rank, samples);
  EvalShare share{own.first, own.count, own.count > 0 ? own.micro_batch : 0, 0};
  for (int r = 0; r < plan.WorldSize(); ++r) {
    const Range range = RangeOf(plan, r, samples);
    if (range.count > 0)
      share.rounds = std::max(share.rounds, (range.count + range.micro_batch - 1) / range.micro_batch);
  }
  return share;
}

}  // namespace poplar
