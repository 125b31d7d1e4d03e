// The learning rate of each optimizer step: a linear warm-up, then the peak rate held,
// or decayed by a cosine or a line to a floor; the shape of nanoGPT's and most GPT
// recipes. It is a function of the step number alone, so a resumed run goes on at the
// rates of a run that never stopped, on any plan.
//
// Step s (counting from 1) with peak rate lr, W warm-up steps, decay over T = D - W steps
// (D: decay_steps) to min_lr, and e = s - 1 (the steps done before it):
//   e < W              lr * (e + 1) / W
//   constant           lr
//   t = min(e - W, T)  cosine: min_lr + (lr - min_lr) * (1 + cos(pi * t / T)) / 2
//                      linear: min_lr + (lr - min_lr) * (1 - t / T)
// which is PyTorch's SequentialLR of LinearLR(start_factor=1/W, total_iters=W-1) and then
// CosineAnnealingLR(T_max=T, eta_min=min_lr) or LinearLR(end_factor=min_lr/lr,
// total_iters=T), stepped once per optimizer step, except that the cosine stays at
// min_lr after T instead of rising again (milestones=[W]; with W = 0 the decay scheduler
// alone, and W = 1 is the same as none). The rate reaches min_lr at step D + 1: with D =
// the run's last step, as by default, its last step is one decay step above it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace poplar {

enum class LrDecay { kConstant, kCosine, kLinear };

// "constant", "cosine", "linear".
const char* LrDecayName(LrDecay decay);
std::optional<LrDecay> LrDecayNamed(const std::string& name);

struct LrSchedule {
  std::int64_t warmup_steps = 0;       // W; 0: none
  LrDecay decay = LrDecay::kConstant;
  std::int64_t decay_steps = 0;        // D; used when decaying, > warmup_steps
  double min_lr = 0;                   // used when decaying; from 0 to the peak rate
};

// What is wrong with `schedule` for peak rate `lr`, or "" when nothing is: the reason,
// and in `key` which setting it is about ("warmup_steps", "decay_steps", "min_lr"), so
// that callers can name their own flag or key.
std::string LrScheduleProblem(const LrSchedule& schedule, double lr, std::string* key);

// The rate of step `step` (>= 1) for peak rate `lr`.
double LearningRateAt(const LrSchedule& schedule, double lr, std::int64_t step);

}  // namespace poplar
