// The speed of an emulated device (docs/worker.md, emulated devices): extra wall time in
// proportion to the compute's own work. Training and profiles stretch the same spans:
// each micro-batch's forward and backward, and the optimizer step less its waits in
// collectives, so a profile and the training it predicts see the same device.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace poplar {

// One span of an emulated device's compute (a micro-batch, an optimizer step, an
// evaluation micro-batch): made before the compute, Stretch()ed after it.
//
// A device `slowdown` times slower takes that many times the compute's own work, and the
// work is the CPU time the worker's threads spent over the span (libtorch's, Gloo's),
// or the span's own wall time where that is less (threads computing in parallel). Wall
// time alone would also stretch what the host took from the worker (another process on
// its CPU, an interrupt): on a 2-core machine whose other CPU runs a rank at full speed,
// every agent's and head's wakeup lands on the slow device's CPU, and a stretch of wall
// time multiplied each by the slowdown. The wait absorbs such a delay, as a slower
// device's idle time would, up to (slowdown - 1) times the work.
class EmulatedCompute {
 public:
  EmulatedCompute() : cpu_start_(ProcessCpuSeconds()) {}

  // After compute whose own wall time was `own_s` (the span less its waits in
  // collectives), waits until the span has lasted `slowdown` times its work; returns
  // `own_s` plus the wait as it really lasted. A sleep overruns what it asks for (by
  // 0.1-0.2 ms on a virtual machine), and the step pays the overrun, so the profile that
  // predicts the step counts it too. A slowdown of 1 or less (any real device) waits
  // nothing and returns `own_s`.
  double Stretch(double own_s, double slowdown) const {
    if (slowdown <= 1.0) return own_s;
    const double work = std::min(own_s, ProcessCpuSeconds() - cpu_start_);
    const double wait = work * slowdown - own_s;
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

}  // namespace poplar
