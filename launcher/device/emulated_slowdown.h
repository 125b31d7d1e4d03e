// The speed of an emulated device (docs/worker.md, emulated devices): extra wall time in
// proportion to measured compute. Training and profiles stretch the same spans:
// each micro-batch's forward and backward, and the optimizer step less its waits in
// collectives, so a profile and the training it predicts see the same device.
#pragma once

#include <chrono>
#include <thread>

namespace poplar {

// After compute that took `measured_s` of CPU wall time, waits (slowdown - 1) times as
// long again, so that the device is `slowdown` times slower; returns the stretched time:
// `measured_s` plus the wait as it really lasted. A sleep overruns what it asks for (by
// 0.1-0.2 ms on a virtual machine), and the step pays the overrun, so the profile that
// predicts the step counts it too. A slowdown of 1 or less (any real device) waits nothing.
inline double StretchCompute(double measured_s, double slowdown) {
  if (slowdown <= 1.0) return measured_s;
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(measured_s * (slowdown - 1.0)));
  return measured_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace poplar
