// NodeCalls: one call per node side by side, each once; a signal while they run cancels
// them once and is returned; the calls are joined however the caller leaves.
#include "launcher/head/node_calls.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

namespace poplar {
namespace {

TEST(NodeCalls, RunsEachCallOnceSideBySide) {
  std::vector<std::atomic<int>> runs(5);
  std::atomic<int> inside{0}, most_inside{0};
  NodeCalls calls(runs.size(), [&](std::size_t i) {
    const int now = ++inside;
    for (int seen = most_inside; seen < now && !most_inside.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ++runs[i];
    --inside;
  });
  calls.Join();
  for (const auto& count : runs) EXPECT_EQ(count, 1);
  EXPECT_GT(most_inside, 1) << "the calls ran one after the other";
}

TEST(NodeCalls, ASignalCancelsTheCallsOnceAndIsReturned) {
  const Interruption interruption;
  std::atomic<bool> cancelled{false};
  std::atomic<int> cancels{0};
  NodeCalls calls(
      3,
      [&](std::size_t) {
        while (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      },
      [&] {
        ++cancels;
        cancelled = true;
      });
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::raise(SIGTERM);  // recorded by the Interruption, not the end of the test
  });
  EXPECT_EQ(calls.JoinUnless(interruption), SIGTERM);
  signaller.join();
  EXPECT_EQ(cancels, 1);
}

TEST(NodeCalls, WithoutASignalJoinUnlessReturnsZero) {
  const Interruption interruption;
  std::atomic<int> cancels{0};
  NodeCalls calls(
      2, [](std::size_t) {}, [&] { ++cancels; });
  EXPECT_EQ(calls.JoinUnless(interruption), 0);
  EXPECT_EQ(cancels, 0);
}

}  // namespace
}  // namespace poplar
