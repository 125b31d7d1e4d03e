#include "launcher/head/node_calls.h"

#include <chrono>
#include <utility>

namespace poplar {

NodeCalls::NodeCalls(std::size_t count, std::function<void(std::size_t)> call, std::function<void()> cancel)
    : call_(std::move(call)), cancel_(std::move(cancel)) {
  try {
    for (std::size_t i = 0; i < count; ++i) {
      threads_.emplace_back([this, i] {
        call_(i);
        std::lock_guard<std::mutex> lock(mutex_);
        ++finished_;
        done_.notify_all();
      });
    }
  } catch (...) {  // no thread to be had: end the calls started
    cancel_();
    Join();
    throw;
  }
}

NodeCalls::~NodeCalls() { Join(); }

void NodeCalls::Join() {
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

int NodeCalls::JoinUnless(const Interruption& interruption) {
  int signal = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    while (finished_ < threads_.size()) {
      done_.wait_for(lock, std::chrono::milliseconds(200));
      if (signal == 0 && interruption.signal() != 0) {
        signal = interruption.signal();
        cancel_();
      }
    }
  }
  Join();
  return signal;
}

}  // namespace poplar
