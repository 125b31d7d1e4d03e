// An emulated device's CPUs (launcher/device/device.h: RunOnCpus): every thread of the
// worker, those running when it binds and those it starts later, runs on them only.
#include <gtest/gtest.h>
#include <sched.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/device/device.h"
#include "planner/base/input_error.h"

namespace poplar {
namespace {

cpu_set_t MaskOfThisThread() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  EXPECT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  return mask;
}

// The mask this test process had; restored on this thread when the test ends.
class CpuBinding : public ::testing::Test {
 protected:
  ~CpuBinding() override { sched_setaffinity(0, sizeof original_, &original_); }
  // The last CPU this process may run on (not CPU 0 where there are several, so that
  // binding changes something).
  int SomeAllowedCpu() const {
    int last = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &original_)) last = cpu;
    }
    return last;
  }
  cpu_set_t original_ = MaskOfThisThread();
};

TEST_F(CpuBinding, BindsThreadsRunningNowAndThoseStartedLater) {
  const int cpu = SomeAllowedCpu();
  ASSERT_GE(cpu, 0);
  // A thread that exists before the binding, and reads its mask after it.
  std::mutex lock;
  std::condition_variable changed;
  bool bound = false;
  cpu_set_t earlier_mask;
  std::thread earlier([&] {
    std::unique_lock<std::mutex> held(lock);
    changed.wait(held, [&] { return bound; });
    earlier_mask = MaskOfThisThread();
  });
  RunOnCpus(std::to_string(cpu));
  {
    std::lock_guard<std::mutex> held(lock);
    bound = true;
  }
  changed.notify_one();
  earlier.join();
  cpu_set_t later_mask;
  std::thread later([&] { later_mask = MaskOfThisThread(); });
  later.join();
  for (const cpu_set_t& mask : {MaskOfThisThread(), earlier_mask, later_mask}) {
    EXPECT_EQ(CPU_COUNT(&mask), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &mask));
  }
}

TEST_F(CpuBinding, RefusesListsThatAreNotCpusItMayRunOn) {
  for (const auto& [text, words] : std::vector<std::pair<std::string, std::string>>{
           {"a", "'a' is not a list of CPUs"},
           {"2-1", "'2-1' is not a list of CPUs"},
           {std::to_string(CPU_SETSIZE), "is out of range"},
           {std::to_string(CPU_SETSIZE - 1), "is not one this process may run on"}}) {
    if (text == std::to_string(CPU_SETSIZE - 1) && CPU_ISSET(CPU_SETSIZE - 1, &original_)) continue;
    try {
      RunOnCpus(text);
      ADD_FAILURE() << "bound to " << text;
    } catch (const InputError& error) {
      EXPECT_EQ(error.file(), "--cpus");  // a flag is named where a file would be
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  }
  // Nothing was bound by a refused list.
  const cpu_set_t now = MaskOfThisThread();
  EXPECT_TRUE(CPU_EQUAL(&now, &original_));
}

}  // namespace
}  // namespace poplar
