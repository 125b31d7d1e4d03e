#include "launcher/zero/loss_scaler.h"

namespace poplar {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) { state_.scale = options.init_scale; }

bool LossScaler::Update(bool finite) {
  if (!finite) {
    state_.scale *= options_.backoff_factor;
    state_.growth_tracker = 0;
    return true;
  }
  if (++state_.growth_tracker == options_.growth_interval) {
    state_.scale *= options_.growth_factor;
    state_.growth_tracker = 0;
  }
  return false;
}

}  // namespace poplar
