#include "launcher/zero/loss_scaler.h"

namespace poplar {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options), scale_(options.init_scale) {}

bool LossScaler::Update(bool finite) {
  if (!finite) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return true;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  return false;
}

}  // namespace poplar
