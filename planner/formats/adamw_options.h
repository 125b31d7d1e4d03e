// AdamW's settings for a run: torch.optim.AdamW's hyperparameters, the learning-rate
// schedule and gradient clipping. Torch-free, so that what records them (a checkpoint's
// training recipe, training_recipe.h) needs no libtorch; launcher/zero/adamw.h applies them.
#pragma once

#include "planner/formats/lr_schedule.h"
#include "planner/formats/training_limits.h"

namespace poplar {

struct AdamWOptions {
  double lr = kDefaultLearningRate;  // the peak rate: `schedule` gives each step's (LearningRateAt)
  LrSchedule schedule;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0: no clipping
};

}  // namespace poplar
