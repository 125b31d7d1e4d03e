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
  // of the tokens for a forward pass alone) whose own wall time was `own_s`, the span
  // having waited `waited_s` besides in collectives, sleeps until the compute has lasted
  // what `speed` says, and returns how long it lasted: the longest of `own_s`, `slowdown`
  // times the work (stretched after the waits), and the rate's time, which the waits
  // overlap, as a GPU computes while its collectives are in flight (stage 3's gathers
  // inside a micro-batch hold each rank to the others' host-speed compute; the rate's
  // time absorbs that). A sleep overruns what it asks for (by 0.1-0.2 ms on a virtual
  // machine), and the step pays the overrun, so the profile that predicts the step
  // counts it too. A real device (slowdown 1, no rate) sleeps nothing: `own_s`.
  double Stretch(double own_s, const EmulatedSpeed& speed, double training_tokens = 0, double waited_s = 0) const {
    const double rated = training_tokens * speed.seconds_per_token;
    const double slowed =
        speed.slowdown > 1.0 ? std::min(own_s, ProcessCpuSeconds() - cpu_start_) * speed.slowdown : 0.0;
    const double sleep = std::max(slowed - own_s, rated - own_s - waited_s);
    const double lasted = std::max({own_s, slowed, rated});
    if (sleep <= 0) return lasted;
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    const double overrun = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - sleep;
    return lasted + std::max(0.0, overrun);
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
