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
  std::int64_t warmup_steps = 0;  // W; 0: none
  LrDecay decay = LrDecay::kConstant;
  std::int64_t decay_steps = 0;  // D; used when decaying, > warmup_steps
  double min_lr = 0;             // used when decaying; from 0 to the peak rate
};

// What a user sets, as the worker's flags or the cluster file's job keys; what is unset
// takes the default.
struct LrScheduleSettings {
  std::int64_t warmup_steps = 0;
  LrDecay decay = LrDecay::kConstant;
  std::optional<std::int64_t> decay_steps;  // unset: the job's last step
  std::optional<double> min_lr;             // unset: the peak rate / 10
};

// How a caller names the settings in its errors: "--min-lr" or "min_lr", ...
struct LrScheduleNames {
  std::string warmup_steps, decay_steps, min_lr;
  std::string steps;        // what sets the job's last step, which decay_steps defaults to
  std::string add_a_decay;  // "add --lr-decay cosine or linear"
};

// `settings` for peak rate `lr` in a job of `steps`, with the defaults filled in. Throws
// InputError(<the setting, as `names` spells it>, "", reason) for a negative warm-up,
// decay_steps or min_lr without a decay (they would change nothing), a decay that ends
// no later than the warm-up (named as `names.steps` when decay_steps is unset), and a
// floor outside 0 to `lr`. The worker and the head (the cluster file) both resolve
// schedules here, so that the head refuses what the worker would.
LrSchedule ResolveLrSchedule(const LrScheduleSettings& settings, double lr, std::int64_t steps,
                             const LrScheduleNames& names);

// The rate of step `step` (>= 1) for peak rate `lr`.
double LearningRateAt(const LrSchedule& schedule, double lr, std::int64_t step);

}  // namespace poplar
