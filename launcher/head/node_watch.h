// NodeWatch: whether the agents of nodes an elastic launch left out answer again. A
// thread of its own asks them (AnsweringNodes) every few seconds while the job trains
// without them, so that `poplar launch --elastic` can take them back at the next
// checkpoint (docs/operations.md, "Elastic") without waiting on a down host itself.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "planner/cluster/cluster.h"

namespace poplar {

class NodeWatch {
 public:
  // Watches every node of `left_out` (a cluster of the nodes left out), asking every
  // `every`; none: no thread.
  NodeWatch(ClusterSpec left_out, std::chrono::seconds every);
  ~NodeWatch();  // stops asking; waits for a question under way (at most its 2 s deadline)
  NodeWatch(const NodeWatch&) = delete;
  NodeWatch& operator=(const NodeWatch&) = delete;

  // The nodes that answered the last time they were asked (empty until one does).
  std::vector<std::string> answering() const;

 private:
  void Watch();

  const ClusterSpec left_out_;
  const std::chrono::seconds every_;
  mutable std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::vector<std::string> answering_;
  std::thread thread_;
};

}  // namespace poplar
