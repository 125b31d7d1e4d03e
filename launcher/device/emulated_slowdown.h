// The speed of an emulated device (docs/worker.md, emulated devices): extra wall time in
// proportion to the compute's own work, or up to its declared rate. Training and profiles stretch the same spans:
// each micro-batch's forward and backward, and the optimizer step less its waits in
// collectives, so a profile and the training it predicts see the same device.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace poplar {

// An emulated device's speed: each compute lasts `slowdown` times its work and, where
// the device declares a rate (--gflops), at least its FLOPs over that rate: a training
// token `seconds_per_token` (the model's forward and backward FLOPs per token over the
// rate), a token of a forward pass alone a third of it. A device with a rate computes at
// that rate whatever the host's speed does, as long as the host keeps ahead of it.
struct EmulatedSpeed {
  double slowdown = 1.0;
  double seconds_per_token = 0;  // 0: no declared rate
};

// One span of an emulated device's compute (a micro-batch, an optimizer step, an
// evaluation micro-batch): made before the compute, Stretch()ed after it.
//
// The work is the CPU time the worker's threads spent over the span (libtorch's, Gloo's),
// or the span's own wall time where that is less (threads computing in parallel). Wall
// time alone would also stretch what the host took from the worker (another process on
// its CPU, an interrupt): on a 2-core machine whose other CPU runs a rank at full speed,
// every agent's and head's wakeup lands on the slow device's CPU, and a stretch of wall
// time multiplied each by the slowdown. The wait absorbs such a delay, as a slower
// device's idle time would.
class EmulatedCompute {
 public:
  EmulatedCompute() : cpu_start_(ProcessCpuSeconds()) {}

  // After compute of `training_tokens` tokens' worth (0 for the optimizer step, a third
  // of the tokens for a forward pass alone) whose own wall time was `own_s` (the span
  // less its waits in collectives), waits until the span has lasted what `speed` says;
  // returns `own_s` plus the wait as it really lasted. A sleep overruns what it asks for
  // (by 0.1-0.2 ms on a virtual machine), and the step pays the overrun, so the profile
  // that predicts the step counts it too. A real device (slowdown 1, no rate) waits
  // nothing and returns `own_s`.
  double Stretch(double own_s, const EmulatedSpeed& speed, double training_tokens = 0) const {
    double lasts = training_tokens * speed.seconds_per_token;
    if (speed.slowdown > 1.0)
      lasts = std::max(lasts, std::min(own_s, ProcessCpuSeconds() - cpu_start_) * speed.slowdown);
    const double wait = lasts - own_s;
    if (wait <= 0) return own_s;
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    return own_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // The CPU time every thread of this process has used, in seconds.
  static double ProcessCpuSeconds() {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
  }

 private:
  double cpu_start_;
};

// The speed of an emulated device of `slowdown` and rate `gflops` (0: none) training a
// model of `flops_per_token` (ModelConfig::TrainingFlopsPerToken).
inline EmulatedSpeed SpeedOf(double slowdown, double gflops, double flops_per_token) {
  return {slowdown, gflops > 0 ? flops_per_token / (gflops * 1e9) : 0.0};
}

}  // namespace poplar
