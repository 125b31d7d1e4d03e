// The speed of an emulated device (docs/worker.md, emulated devices): extra wall time in
// proportion to measured compute. Training and profiles stretch the same spans:
// each micro-batch's forward and backward, and the optimizer step less its waits in
// collectives, so a profile and the training it predicts see the same device.
#pragma once

#include <chrono>
#include <thread>

namespace poplar {

// After compute that took `measured_s` of CPU wall time, waits (slowdown - 1) times as
// long again, so that the device is `slowdown` times slower; returns the stretched time,
// slowdown x measured_s. A slowdown of 1 or less (any real device) waits nothing.
inline double StretchCompute(double measured_s, double slowdown) {
  if (slowdown <= 1.0) return measured_s;
  std::this_thread::sleep_for(std::chrono::duration<double>(measured_s * (slowdown - 1.0)));
  return measured_s * slowdown;
}

}  // namespace poplar
