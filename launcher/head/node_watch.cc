#include "launcher/head/node_watch.h"

#include <sstream>
#include <utility>

#include "launcher/head/head_agents.h"

namespace poplar {

NodeWatch::NodeWatch(ClusterSpec left_out, std::chrono::seconds every) : left_out_(std::move(left_out)), every_(every) {
  if (!left_out_.nodes.empty()) thread_ = std::thread([this] { Watch(); });
}

NodeWatch::~NodeWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> NodeWatch::answering() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return answering_;
}

void NodeWatch::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_.wait_for(lock, every_, [this] { return stopping_; })) {
    lock.unlock();
    std::ostringstream ignored;  // why the others are still out: said when they are left out
    std::vector<std::string> answering;
    try {
      answering = AnsweringNodes(left_out_, std::chrono::seconds(2), ignored);
    } catch (const std::exception&) {
      // (credentials unreadable now: nobody is taken back)
    }
    lock.lock();
    answering_ = std::move(answering);
  }
}

}  // namespace poplar
