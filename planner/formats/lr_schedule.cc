#include "planner/formats/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planner/base/input_error.h"

namespace poplar {
namespace {

// 6e-05, not 0.000060.
std::string Shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

const char* LrDecayName(LrDecay decay) {
  switch (decay) {
    case LrDecay::kConstant:
      return "constant";
    case LrDecay::kCosine:
      return "cosine";
    case LrDecay::kLinear:
      return "linear";
  }
  return "constant";
}

std::optional<LrDecay> LrDecayNamed(const std::string& name) {
  for (LrDecay decay : {LrDecay::kConstant, LrDecay::kCosine, LrDecay::kLinear}) {
    if (name == LrDecayName(decay)) return decay;
  }
  return std::nullopt;
}

LrSchedule ResolveLrSchedule(const LrScheduleSettings& settings, double lr, std::int64_t steps,
                             const LrScheduleNames& names) {
  if (settings.warmup_steps < 0) throw InputError(names.warmup_steps, "", "must be zero or more");
  LrSchedule schedule;
  schedule.warmup_steps = settings.warmup_steps;
  schedule.decay = settings.decay;
  if (settings.decay == LrDecay::kConstant) {
    if (settings.decay_steps) throw InputError(names.decay_steps, "", "is for a decay: " + names.add_a_decay);
    if (settings.min_lr) throw InputError(names.min_lr, "", "is for a decay: " + names.add_a_decay);
    return schedule;
  }
  schedule.decay_steps = settings.decay_steps.value_or(steps);
  schedule.min_lr = settings.min_lr.value_or(lr / 10);
  if (schedule.decay_steps <= schedule.warmup_steps) {
    throw InputError(settings.decay_steps ? names.decay_steps : names.steps, "",
                     "is " + std::to_string(schedule.decay_steps) + ", not more than the " +
                         std::to_string(schedule.warmup_steps) + " warm-up steps: no step is left to decay over");
  }
  if (!(schedule.min_lr >= 0 && schedule.min_lr <= lr)) {
    throw InputError(
        names.min_lr, "",
        "must be from 0 to the peak learning rate (" + Shortest(lr) + "), got " + Shortest(schedule.min_lr));
  }
  return schedule;
}

double LearningRateAt(const LrSchedule& schedule, double lr, std::int64_t step) {
  const std::int64_t done = step - 1;  // e: the steps before this one
  if (done < schedule.warmup_steps) {
    return lr * static_cast<double>(done + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.decay == LrDecay::kConstant) return lr;
  const double span = static_cast<double>(schedule.decay_steps - schedule.warmup_steps);
  const double t = std::min(static_cast<double>(done - schedule.warmup_steps), span);
  const double fraction = schedule.decay == LrDecay::kCosine ? (1 + std::cos(M_PI * t / span)) / 2 : 1 - t / span;
  return schedule.min_lr + (lr - schedule.min_lr) * fraction;
}

}  // namespace poplar
