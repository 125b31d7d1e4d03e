// Wall-clock timing for the worker's metrics and profiles.
#pragma once

#include <chrono>

namespace poplar {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace poplar
