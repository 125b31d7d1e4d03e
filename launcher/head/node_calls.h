// The head's way of asking every node at once: one thread per call, joined however the
// caller leaves. Profiling, checking a launch and streaming a job's events all run one
// call per node side by side, so that a cluster answers in the time of its slowest node.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "launcher/head/interruption.h"

namespace poplar {

class NodeCalls {
 public:
  // Starts call(i) on a thread of its own for i = 0..count-1. `call` must not throw: it
  // records its own result or error. `cancel` ends the calls still running (a gRPC
  // CallCanceller's Cancel); if a thread cannot be started, it is called, the threads
  // started are joined, and the constructor throws.
  NodeCalls(
      std::size_t count, std::function<void(std::size_t)> call, std::function<void()> cancel = [] {});
  ~NodeCalls();  // Join()
  NodeCalls(const NodeCalls&) = delete;
  NodeCalls& operator=(const NodeCalls&) = delete;

  // Waits for every call to return.
  void Join();
  // Waits for every call to return, polling `interruption` every 200 ms: on the first
  // signal, calls `cancel` once and goes on waiting for the calls to end. Returns that
  // signal, or 0 if none came while they ran.
  int JoinUnless(const Interruption& interruption);
  // Calls `cancel` (each call's thread goes on to return).
  void Cancel() { cancel_(); }

 private:
  std::function<void(std::size_t)> call_;
  std::function<void()> cancel_;
  std::mutex mutex_;  // guards finished_
  std::condition_variable done_;
  std::size_t finished_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace poplar
