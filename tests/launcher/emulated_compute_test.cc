// An emulated device's speed (launcher/device/emulated_slowdown.h): a span lasts
// `slowdown` times its work, the CPU time it used, and time the host took from the
// worker is absorbed by the wait rather than stretched with it; a declared rate sets
// how long a compute lasts whatever the host's speed.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "launcher/device/emulated_slowdown.h"

namespace poplar {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Keeps this thread computing until the process has used `seconds` more CPU time.
void Compute(double seconds) {
  const double until = EmulatedCompute::ProcessCpuSeconds() + seconds;
  volatile double sink = 0;
  while (EmulatedCompute::ProcessCpuSeconds() < until) {
    for (int i = 0; i < 1000; ++i) sink = sink + i;
  }
}

TEST(EmulatedCompute, ASpanLastsTheSlowdownTimesItsWork) {
  const auto start = Clock::now();
  const EmulatedCompute compute;
  Compute(0.02);
  const double counted = compute.Stretch(SecondsSince(start), EmulatedSpeed{3.0, 0});
  const double lasted = SecondsSince(start);
  EXPECT_GE(counted, 0.06);
  EXPECT_GE(lasted, 0.06);
  EXPECT_NEAR(counted, lasted, 0.002);  // what it says it took is what it took
}

// 20 ms of work and 20 ms taken by the host (a sleep stands for another process on the
// CPU): the span lasts 3 x 20 ms, not 3 x 40 ms.
TEST(EmulatedCompute, TimeTheHostTookIsAbsorbedNotStretched) {
  const auto start = Clock::now();
  const EmulatedCompute compute;
  Compute(0.02);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double counted = compute.Stretch(SecondsSince(start), EmulatedSpeed{3.0, 0});
  EXPECT_GE(counted, 0.06);
  EXPECT_LT(counted, 0.10) << "the host's 20 ms were stretched too";
}

// A declared rate: 50 tokens at 1 ms each last 50 ms, however little the work took; a
// host slower than the rate waits nothing.
TEST(EmulatedCompute, ADeclaredRateSetsHowLongTheComputeLasts) {
  const EmulatedSpeed speed{1.0, 0.001};
  const auto start = Clock::now();
  const EmulatedCompute compute;
  Compute(0.005);
  const double counted = compute.Stretch(SecondsSince(start), speed, 50);
  EXPECT_GE(counted, 0.05);
  EXPECT_LT(counted, 0.08);
  const auto slow_start = Clock::now();
  const EmulatedCompute slow;
  Compute(0.02);
  const double own = SecondsSince(slow_start);
  EXPECT_EQ(slow.Stretch(own, speed, 10), own);  // 10 ms asked, 20 taken
  // Waits in collectives inside the span overlap the rate's time: 5 ms of work and 30 ms
  // waited (said, not slept here) sleep 15 ms more, and the compute lasted 50.
  const auto waiting_start = Clock::now();
  const EmulatedCompute waiting;
  Compute(0.005);
  const double lasted = waiting.Stretch(SecondsSince(waiting_start), speed, 50, 0.03);
  EXPECT_GE(lasted, 0.05);
  EXPECT_LT(lasted, 0.06);
  EXPECT_LT(SecondsSince(waiting_start), 0.035);
  EXPECT_DOUBLE_EQ(SpeedOf(2.0, 10, 5e6).seconds_per_token, 5e6 / 10e9);
  EXPECT_EQ(SpeedOf(2.0, 0, 5e6).seconds_per_token, 0);
}

TEST(EmulatedCompute, ARealDeviceWaitsNothing) {
  const auto start = Clock::now();
  const EmulatedCompute compute;
  Compute(0.01);
  const double own = SecondsSince(start);
  EXPECT_EQ(compute.Stretch(own, EmulatedSpeed{}, 1000), own);
  EXPECT_LT(SecondsSince(start), own + 0.005);
}

}  // namespace
}  // namespace poplar
