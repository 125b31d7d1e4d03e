// Dynamic loss scaling for fp16 training, with PyTorch's GradScaler semantics: the loss's
// gradient is multiplied by `scale` in backward, so that small gradients survive fp16;
// the update divides it out before clipping. A step whose gradients hold an inf or a nan
// is skipped (no update) and halves the scale; `growth_interval` clean steps in a row
// double it. Every rank holds one and feeds it the same verdict (the global gradient
// norm, which is all-reduced or computed from identical gradients), so every rank skips
// the same steps and keeps the same scale: one agreement, no collective of its own.
#pragma once

#include <cstdint>

namespace poplar {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, GradScaler's init_scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

// What a checkpoint keeps of a scaler, GradScaler's state_dict: the scale and the clean
// steps since it last changed.
struct LossScalerState {
  double scale = 65536.0;
  std::int64_t growth_tracker = 0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  double scale() const { return state_.scale; }
  const LossScalerState& state() const { return state_; }
  void Restore(const LossScalerState& state) { state_ = state; }

  // After a step: `finite` whether its gradients were all finite (the step was taken).
  // Returns true when the step is to be skipped (not finite).
  bool Update(bool finite);

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace poplar
