// Communicator's count of the collectives in flight, which profiles record and the memory
// model turns into buffer bytes: alone (a profile's rank) and as two ranks over Gloo on
// loopback (a job's), which must count alike.
#include "launcher/comm/communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "planner/base/free_port.h"

namespace poplar {
namespace {

constexpr std::chrono::seconds kTimeout(30);

// Starts a reduce-scatter of 8 elements cut {3, 5} and an all-gather of 6 cut {2, 4},
// overlapping, on a rank of two (or rank 0 alone standing for two), and an all-reduce,
// which is not counted. Returns the counts seen along the way, in order.
std::vector<std::int64_t> CountsOfOverlappingCollectives(Communicator& communicator) {
  const int rank = communicator.rank();
  const Communicator::Chunks scattered = {3, 5};
  const Communicator::Chunks gathered = {2, 4};
  std::vector<std::int64_t> counts;
  auto input = torch::arange(8, torch::kFloat32) + 10 * rank;
  auto owned = torch::empty({scattered[rank]});
  auto shard = torch::full({gathered[rank]}, static_cast<float>(rank + 1));
  auto whole = torch::empty({6});
  auto summed = torch::ones({4});

  communicator.ResetMostElementsInFlight();
  counts.push_back(communicator.elements_in_flight());  // 0
  auto reduce = communicator.StartReduceScatterSum(input, owned, scattered);
  counts.push_back(communicator.elements_in_flight());  // 8
  auto gather = communicator.StartAllGather(shard, whole, gathered);
  counts.push_back(communicator.elements_in_flight());  // 14
  auto all = communicator.StartAllReduceSum(summed);
  counts.push_back(communicator.elements_in_flight());  // 14: all-reduces are not counted
  all->Wait();
  reduce->Wait();
  counts.push_back(communicator.elements_in_flight());       // 6
  counts.push_back(communicator.most_elements_in_flight());  // 14
  gather->Wait();
  counts.push_back(communicator.elements_in_flight());  // 0
  communicator.ResetMostElementsInFlight();
  counts.push_back(communicator.most_elements_in_flight());  // 0
  {
    // One destroyed unfinished is waited for, and leaves the count.
    auto dropped = communicator.StartAllGather(shard, whole, gathered);
  }
  counts.push_back(communicator.elements_in_flight());       // 0
  counts.push_back(communicator.most_elements_in_flight());  // 6
  return counts;
}

const std::vector<std::int64_t> kExpected = {0, 8, 14, 14, 6, 14, 0, 0, 0, 6};

// Equal chunks take the other paths (Gloo's all-gather, the all-to-all reduce-scatter
// without counts): a reduce-scatter of 8 and an all-gather of 6, overlapping.
std::vector<std::int64_t> CountsOfEqualChunks(Communicator& communicator) {
  const int ranks = communicator.world_size();
  auto input = torch::ones({8});
  auto owned = torch::empty({8 / ranks});
  auto shard = torch::ones({6 / ranks});
  auto whole = torch::empty({6});
  communicator.ResetMostElementsInFlight();
  auto reduce = communicator.StartReduceScatterSum(input, owned);
  auto gather = communicator.StartAllGather(shard, whole);
  const std::int64_t both = communicator.elements_in_flight();
  reduce->Wait();
  gather->Wait();
  return {both, communicator.elements_in_flight(), communicator.most_elements_in_flight()};
}

const std::vector<std::int64_t> kExpectedEqual = {14, 0, 14};

TEST(CommunicatorInFlight, ARankAloneCountsTheElementsARankOfAJobWould) {
  DistributedEnv alone;
  Communicator communicator(alone, kTimeout);
  EXPECT_EQ(communicator.backend_name(), "none");
  EXPECT_EQ(CountsOfOverlappingCollectives(communicator), kExpected);
  EXPECT_EQ(CountsOfEqualChunks(communicator), kExpectedEqual);
}

TEST(CommunicatorInFlight, TwoRanksOverGlooCountTheWholeOfEachCollective) {
  const int port = FindFreePort();
  auto rank = [port](int r) {
    DistributedEnv env;
    env.rank = r;
    env.world_size = 2;
    env.local_rank = r;
    env.master_port = port;
    Communicator communicator(env, kTimeout, torch::kCPU, CollectiveBackend::kGloo);
    std::vector<std::int64_t> counts = CountsOfOverlappingCollectives(communicator);
    const std::vector<std::int64_t> equal = CountsOfEqualChunks(communicator);
    counts.insert(counts.end(), equal.begin(), equal.end());
    return counts;
  };
  std::vector<std::int64_t> expected = kExpected;
  expected.insert(expected.end(), kExpectedEqual.begin(), kExpectedEqual.end());
  auto other = std::async(std::launch::async, rank, 1);
  EXPECT_EQ(rank(0), expected);
  EXPECT_EQ(other.get(), expected);
}

}  // namespace
}  // namespace poplar
