// `poplar-worker network`: real ranks on loopback time the three collectives over Gloo;
// rank 0's lines are what `poplar network` fits (planner/formats/network.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "planner/base/command_failed.h"
#include "planner/formats/network.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

std::vector<MeasurementLine> ReadMeasurements(const std::string& path) {
  std::vector<MeasurementLine> lines;
  for (const std::string& text : ReadLines(path)) lines.push_back(ParseMeasurementLine(text, path));
  return lines;
}

TEST(NetworkMode, TimesEveryCollectiveAtEverySize) {
  ScratchDir scratch("poplar_network_mode");
  const JobOutcome job = RunJob(scratch, 3,
                                {"network", "--metrics", scratch.path() + "/net-{rank}.jsonl", "--max-bytes", "1048576",
                                 "--repeats", "3", "--threads", "1", "--precision", "bf16", "--timeout", "60"});
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const auto lines = ReadMeasurements(scratch.path() + "/net-0.jsonl");
  // 4 KiB, 16 KiB, 64 KiB, 256 KiB and the largest, 1 MiB, each rounded down to whole
  // bf16 elements in each of 3 shards (a multiple of 6 bytes); every collective at each.
  const std::vector<double> sizes = {4092, 16380, 65532, 262140, 1048572};
  ASSERT_EQ(lines.size(), 3 * sizes.size());
  std::set<std::pair<int, double>> seen;
  for (const MeasurementLine& line : lines) {
    EXPECT_EQ(line.world_size, 3);
    EXPECT_EQ(line.backend, "gloo");
    EXPECT_GT(line.point.seconds, 0);
    EXPECT_LT(line.point.seconds, 10);
    seen.insert({static_cast<int>(line.point.collective), line.point.bytes});
  }
  for (Collective collective : kCollectives) {
    for (double bytes : sizes) {
      EXPECT_TRUE(seen.count({static_cast<int>(collective), bytes})) << CollectiveName(collective) << " " << bytes;
    }
  }
  // Only rank 0 writes; every rank got the same (slowest-rank) times.
  EXPECT_FALSE(std::filesystem::exists(scratch.path() + "/net-1.jsonl"));
  std::vector<CollectivePoint> points;
  for (const auto& line : lines) points.push_back(line.point);
  const MeasuredNetwork network =
      FitNetwork(points, {{"n", "cpu"}, {"n", "cpu"}, {"n", "cpu"}}, "gloo", Precision::kMixed, "net");
  for (Collective collective : kCollectives) EXPECT_GT(network.times.Of(collective).Seconds(1e6), 0);
}

TEST(NetworkMode, PayloadsStayWithinTheEmulatedMemory) {
  // 128 KiB of device memory: payloads up to an eighth, with room for Gloo's copies,
  // which the counting allocator would refuse to exceed with an out-of-memory error.
  ScratchDir scratch("poplar_network_mode");
  const JobOutcome job = RunJob(scratch, 2,
                                {"network", "--metrics", scratch.path() + "/net.jsonl", "--memory-bytes", "131072",
                                 "--repeats", "2", "--threads", "1", "--timeout", "60"});
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  double largest = 0;
  for (const auto& line : ReadMeasurements(scratch.path() + "/net.jsonl"))
    largest = std::max(largest, line.point.bytes);
  EXPECT_EQ(largest, 16384);
}

// Rank 0 failing on a flag of its own (a --metrics folder that is not there) tells the
// others at once, as in training, rather than leaving rank 1 to wait out --timeout.
// (--timeout 300, the deadline 60 s: a rank that waits is killed, -1.)
TEST(NetworkMode, RankZeroStoppingBeforeTheRendezvousTellsTheOthersWhy) {
  ScratchDir scratch("poplar_network_mode");
  const JobOutcome job = RunJob(
      scratch, 2,
      {"network", "--metrics", scratch.path() + "/missing/net.jsonl", "--max-bytes", "65536", "--timeout", "300"},
      std::chrono::seconds(60));
  ASSERT_EQ(job.exit_codes.size(), 2u);
  EXPECT_EQ(job.exit_codes[0], 1) << job.Describe();
  EXPECT_EQ(job.exit_codes[1], kPeerFailureExitStatus) << job.Describe();
  EXPECT_TRUE(ContainsAll(job.errors[1], {"rank 0 stopped before the rendezvous", "--metrics", "missing"}))
      << job.errors[1];
}

// Ranks run with different flags are told which flag differs, by name, not as a line of
// values.
TEST(NetworkMode, RanksWithDifferentFlagsAreToldWhichDiffers) {
  ScratchDir scratch("poplar_network_mode");
  const std::vector<std::string> common = {"network", "--max-bytes", "65536", "--timeout", "60", "--repeats"};
  std::vector<std::string> two = common, one = common;
  two.push_back("2");
  one.push_back("1");
  const JobOutcome job = RunJob(scratch, {two, one}, std::chrono::seconds(60));
  ASSERT_EQ(job.exit_codes.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(job.exit_codes[rank], 1) << job.Describe();
  EXPECT_TRUE(Contains(job.errors[0], "'--repeats' is 2 here but 1 on rank 1")) << job.errors[0];
  EXPECT_TRUE(Contains(job.errors[1], "'--repeats' is 1 here but 2 on rank 0")) << job.errors[1];
}

// --state-shares times the reduce-scatter and all-gather over uneven chunks (a plan's
// state shares, as training moves them); a list that is not one share per rank is
// refused on every rank, naming the flag.
TEST(NetworkMode, TimesUnevenChunksAndRefusesAMiscount) {
  ScratchDir scratch("poplar_network_mode");
  const JobOutcome job =
      RunJob(scratch, 2,
             {"network", "--metrics", scratch.path() + "/net.jsonl", "--max-bytes", "65536", "--repeats", "2",
              "--threads", "1", "--precision", "bf16", "--state-shares", "3,0", "--timeout", "60"});
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const auto lines = ReadMeasurements(scratch.path() + "/net.jsonl");
  EXPECT_EQ(lines.size(), 3 * 3u);  // 4, 16 and 64 KiB, each collective
  for (const MeasurementLine& line : lines) EXPECT_GT(line.point.seconds, 0);

  const JobOutcome miscount = RunJob(scratch, 2, {"network", "--state-shares", "1,1,1", "--timeout", "20"});
  ASSERT_EQ(miscount.exit_codes.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(miscount.exit_codes[rank], 1) << miscount.Describe();
    EXPECT_TRUE(ContainsAll(miscount.errors[rank], {"--state-shares", "one share per rank (2)"}))
        << miscount.errors[rank];
  }
}

TEST(NetworkMode, OneRankHasNoNetwork) {
  ScratchDir scratch("poplar_network_mode");
  const JobOutcome job = RunJob(scratch, 1, {"network", "--timeout", "20"});
  ASSERT_EQ(job.exit_codes.size(), 1u);
  EXPECT_EQ(job.exit_codes[0], 1);
  EXPECT_TRUE(ContainsAll(job.errors[0], {"WORLD_SIZE", "two or more ranks"})) << job.errors[0];
}

}  // namespace
}  // namespace poplar::testing
