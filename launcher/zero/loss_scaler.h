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

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  // Its state, as GradScaler's state_dict and a checkpoint keep it: the scale and the
  // clean steps since it last changed.
  double scale() const { return scale_; }
  std::int64_t growth_tracker() const { return growth_tracker_; }
  void Restore(double scale, std::int64_t growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }

  // After a step: `finite` whether its gradients were all finite (the step was taken).
  // Returns true when the step is to be skipped (not finite).
  bool Update(bool finite);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
};

}  // namespace poplar
