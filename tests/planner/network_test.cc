// Tests of the measured network (planner/formats/network.h): fitting the collectives' lines,
// the network file, and the cluster file's `network.measured`, which replaces the
// declared links in the cost model.
#include "planner/formats/network.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/cluster/cluster.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;
using testing::ScratchDir;

// Points exactly on seconds = fixed + bytes / rate, from 4 KiB to 64 MiB.
std::vector<CollectivePoint> PointsOnLine(Collective collective, double fixed_s, double bytes_per_s) {
  std::vector<CollectivePoint> points;
  for (double bytes = 4096; bytes <= 64 << 20; bytes *= 4) {
    points.push_back({collective, bytes, fixed_s + bytes / bytes_per_s});
  }
  return points;
}

// The ranks of kMeasuredCluster below: two `fast` on node a, one `slow` on node b.
std::vector<NetworkRank> ThreeRanks() { return {{"a", "fast"}, {"a", "fast"}, {"b", "slow"}}; }

std::vector<CollectivePoint> ThreeLines() {
  std::vector<CollectivePoint> points = PointsOnLine(Collective::kAllReduce, 80e-6, 2e9);
  for (const auto& point : PointsOnLine(Collective::kReduceScatter, 60e-6, 3e9)) points.push_back(point);
  for (const auto& point : PointsOnLine(Collective::kAllGather, 40e-6, 5e9)) points.push_back(point);
  return points;
}

TEST(FitCollectiveLine, RecoversAnExactLine) {
  const CollectiveLine line =
      FitCollectiveLine(PointsOnLine(Collective::kAllGather, 40e-6, 5e9), Collective::kAllGather, "f", "points");
  EXPECT_NEAR(line.fixed_s, 40e-6, 1e-12);
  EXPECT_NEAR(line.payload_bytes_per_s / 5e9, 1.0, 1e-9);
}

TEST(FitCollectiveLine, WeighsSmallAndLargeSizesAlike) {
  // 10% noise on alternate points: an unweighted fit would let the 64 MiB points
  // decide and miss the fixed cost by far more than 10%.
  std::vector<CollectivePoint> points = PointsOnLine(Collective::kAllReduce, 100e-6, 1e9);
  for (std::size_t i = 0; i < points.size(); i += 2) points[i].seconds *= 1.1;
  const CollectiveLine line = FitCollectiveLine(points, Collective::kAllReduce, "f", "points");
  EXPECT_NEAR(line.fixed_s / 100e-6, 1.0, 0.1);
  EXPECT_NEAR(line.payload_bytes_per_s / 1e9, 1.0, 0.1);
}

TEST(FitCollectiveLine, NeverGivesANegativeFixedCost) {
  // Time proportional to size, measured a little fast at the small end.
  std::vector<CollectivePoint> points = PointsOnLine(Collective::kAllReduce, 0, 1e9);
  points[0].seconds *= 0.5;
  const CollectiveLine line = FitCollectiveLine(points, Collective::kAllReduce, "f", "points");
  EXPECT_GE(line.fixed_s, 0.0);
  EXPECT_GT(line.payload_bytes_per_s, 0.0);
}

// On a busy host the larger sizes may time faster than the smaller: no size dependence
// is measurable. The line stays within the file's range, so that the file `poplar
// network` writes reads back.
TEST(FitCollectiveLine, TimesThatFallWithSizeGiveALineTheFileCanHold) {
  std::vector<CollectivePoint> points;
  for (Collective collective : kCollectives) {
    for (double bytes = 4096; bytes <= 64 << 20; bytes *= 4)
      points.push_back({collective, bytes, 1e-3 - bytes * 1e-12});
  }
  const MeasuredNetwork fitted = FitNetwork(points, ThreeRanks(), "gloo", Precision::kFp32, "net.json");
  EXPECT_NEAR(fitted.times.all_reduce.payload_bytes_per_s, kMostLinkGbps * 1e9 / 8, 1.0);
  EXPECT_NEAR(fitted.times.all_reduce.fixed_s, 1e-3, 2e-5);
  const MeasuredNetwork read = ParseNetworkJson(NetworkToJson(fitted).dump(), "net.json");
  EXPECT_NEAR(read.times.all_gather.fixed_s, fitted.times.all_gather.fixed_s, 1e-12);
}

TEST(FitCollectiveLine, NeedsTwoSizes) {
  const std::vector<CollectivePoint> one = {{Collective::kAllGather, 4096, 1e-4}, {Collective::kAllGather, 4096, 2e-4}};
  try {
    FitCollectiveLine(one, Collective::kAllGather, "net.json", "points");
    FAIL() << "fitted a line through one size";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), "net.json");
    EXPECT_TRUE(Contains(error.reason(), "all_gather needs measurements at two or more sizes, has 1"));
  }
}

TEST(NetworkFile, RoundTripsAndKeepsTheLines) {
  const MeasuredNetwork fitted = FitNetwork(ThreeLines(), ThreeRanks(), "gloo", Precision::kMixed, "net.json");
  EXPECT_LT(fitted.WorstRelativeError(), 1e-9);
  const MeasuredNetwork read = ParseNetworkJson(NetworkToJson(fitted).dump(), "net.json");
  EXPECT_EQ(read.world_size(), 3);
  EXPECT_EQ(read.nodes(), 2);
  EXPECT_TRUE(read.ranks == ThreeRanks());
  EXPECT_EQ(read.backend, "gloo");
  EXPECT_EQ(read.precision, Precision::kMixed);
  ASSERT_EQ(read.points.size(), fitted.points.size());
  for (Collective collective : kCollectives) {
    EXPECT_NEAR(read.times.Of(collective).fixed_s, fitted.times.Of(collective).fixed_s, 1e-12);
    EXPECT_NEAR(read.times.Of(collective).Seconds(1e8) / fitted.times.Of(collective).Seconds(1e8), 1.0, 1e-12);
  }
  EXPECT_NEAR(read.times.reduce_scatter.payload_bytes_per_s / 3e9, 1.0, 1e-9);
}

void ExpectNetworkRejected(const std::string& from, const std::string& to, const std::string& key,
                           const std::string& reason_part) {
  std::string text =
      NetworkToJson(FitNetwork(ThreeLines(), ThreeRanks(), "gloo", Precision::kMixed, "net.json")).dump();
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  try {
    ParseNetworkJson(text, "net.json");
    FAIL() << "accepted " << to;
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), "net.json");
    EXPECT_EQ(error.key(), key);
    EXPECT_TRUE(Contains(error.reason(), reason_part));
  }
}

TEST(NetworkFile, RejectsBadValuesNamingTheKey) {
  ExpectNetworkRejected("\"poplar-network/1\"", "\"poplar-network/9\"", "format", "poplar-network/1");
  ExpectNetworkRejected("{\"node\":\"b\",\"device_type\":\"slow\"}", "{\"node\":\"b\"}", "ranks[2].device_type",
                        "required");
  ExpectNetworkRejected("{\"node\":\"a\",\"device_type\":\"fast\"},{\"node\":\"a\",\"device_type\":\"fast\"},", "",
                        "ranks", "two or more ranks");
  ExpectNetworkRejected("\"gloo\"", "\"mpi\"", "backend", "gloo or nccl");
  ExpectNetworkRejected("\"bf16\"", "\"fp8\"", "precision", "fp32 or bf16");
  ExpectNetworkRejected("\"all_gather\":{\"fixed_us\"", "\"all_gathr\":{\"fixed_us\"", "collectives.all_gather",
                        "required");
  ExpectNetworkRejected("\"collective\":\"all_reduce\"", "\"collective\":\"broadcast\"", "points[0].collective",
                        "all_reduce, reduce_scatter or all_gather");
  ExpectNetworkRejected("\"worst_relative_error\":", "\"worst_relative_error\":-5,\"x\":", "worst_relative_error",
                        "zero or positive");
}

// Lines beyond any network are refused, with the cluster file's bounds for a link
// (1e308 Gb/s is infinitely fast; 1e300 us would make every step endless).
TEST(NetworkFile, RejectsLinesBeyondAnyNetwork) {
  const auto fitted = NetworkToJson(FitNetwork(ThreeLines(), ThreeRanks(), "gloo", Precision::kMixed, "net.json"));
  const std::pair<const char*, double> cases[] = {{"fixed_us", 1e300}, {"payload_gbps", 1e308}, {"payload_gbps", 1e-9}};
  for (const auto& [key, value] : cases) {
    auto text = fitted;
    text["collectives"]["all_gather"][key] = value;
    try {
      ParseNetworkJson(text.dump(), "net.json");
      ADD_FAILURE() << "accepted " << key << " = " << value;
    } catch (const InputError& error) {
      EXPECT_EQ(error.key(), std::string("collectives.all_gather.") + key);
      EXPECT_TRUE(Contains(error.reason(), "from 0")) << error.reason();
    }
  }
}

TEST(MeasurementLine, IsWhatTheWorkerWrites) {
  const MeasurementLine line = ParseMeasurementLine(
      R"({"collective":"reduce_scatter","bytes":65536,"seconds":0.0012,"world_size":4,"backend":"nccl"})", "rank 0");
  EXPECT_EQ(line.point.collective, Collective::kReduceScatter);
  EXPECT_EQ(line.point.bytes, 65536);
  EXPECT_EQ(line.point.seconds, 0.0012);
  EXPECT_EQ(line.world_size, 4);
  EXPECT_EQ(line.backend, "nccl");
  // What the worker writes reads back as itself.
  const MeasurementLine again = ParseMeasurementLine(MeasurementLineToJson(line).dump(), "rank 0");
  EXPECT_EQ(again.point.collective, line.point.collective);
  EXPECT_EQ(again.point.bytes, line.point.bytes);
  EXPECT_EQ(again.point.seconds, line.point.seconds);
  EXPECT_EQ(again.world_size, line.world_size);
  EXPECT_EQ(again.backend, line.backend);
  EXPECT_THROW(ParseMeasurementLine(
                   R"({"collective":"all_reduce","bytes":-1,"seconds":1,"world_size":1,"backend":"gloo"})", "rank 0"),
               InputError);
}

// Bytes are whole and bounded: 1.5, 1e-320 and 2^64 are refused; 4096.0, a whole number
// written as a float, reads.
TEST(MeasurementLine, TakesWholeBytesOnly) {
  const auto line = [](const std::string& bytes) {
    return R"({"collective":"all_reduce","bytes":)" + bytes + R"(,"seconds":0.001,"world_size":2,"backend":"gloo"})";
  };
  for (const std::string bytes : {"1.5", "1e-320", "0", "18446744073709551616"}) {
    SCOPED_TRACE(bytes);
    try {
      ParseMeasurementLine(line(bytes), "rank 0");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& error) {
      EXPECT_EQ(error.key(), "bytes");
      EXPECT_NE(error.reason().find("whole number of bytes"), std::string::npos) << error.reason();
    }
  }
  const MeasurementLine written = ParseMeasurementLine(line("4096.0"), "rank 0");
  EXPECT_EQ(written.point.bytes, 4096);
  EXPECT_EQ(MeasurementLineToJson(written)["bytes"].dump(), "4096");  // written whole again
}

// Two nodes, three devices, mixed precision; the network is measured.
constexpr char kMeasuredCluster[] = R"(training:
  global_batch: 32
  precision: mixed
network:
  measured: net.json
nodes:
  - name: a
    devices:
      - {type: fast, count: 2}
  - name: b
    devices:
      - {type: slow, count: 1}
)";

TEST(ClusterMeasuredNetwork, ReplacesTheDeclaredLinks) {
  ScratchDir dir("measured");
  dir.Write("net.json", NetworkToJson(FitNetwork(ThreeLines(), ThreeRanks(), "gloo", Precision::kMixed, "x")).dump());
  const ClusterSpec cluster = LoadClusterFile(dir.Write("cluster.yaml", kMeasuredCluster));
  ASSERT_TRUE(cluster.measured_network.has_value());
  const CollectiveTimes times = cluster.Collectives();
  EXPECT_NEAR(times.all_reduce.Seconds(2e9), 80e-6 + 1.0, 1e-9);
  EXPECT_NEAR(times.all_gather.Seconds(5e9), 40e-6 + 1.0, 1e-9);
}

TEST(ClusterMeasuredNetwork, MustComeFromThisCluster) {
  ScratchDir dir("measured");
  const std::string cluster_file = dir.Write("cluster.yaml", kMeasuredCluster);
  auto expect_rejected = [&](const std::string& reason_part) {
    try {
      LoadClusterFile(cluster_file);
      FAIL() << "accepted a network file that does not fit";
    } catch (const InputError& error) {
      EXPECT_EQ(error.file(), cluster_file);
      EXPECT_EQ(error.key(), "network.measured");
      EXPECT_TRUE(Contains(error.reason(), reason_part));
    }
  };
  expect_rejected("does not exist; make it with `poplar network");
  std::vector<NetworkRank> four = ThreeRanks();
  four.push_back({"b", "slow"});
  dir.Write("net.json", NetworkToJson(FitNetwork(ThreeLines(), four, "gloo", Precision::kMixed, "x")).dump());
  expect_rejected("measured on 4 ranks; this cluster has 3");
  // The same count, other devices: the ranks were on other nodes or of other types.
  dir.Write("net.json", NetworkToJson(FitNetwork(ThreeLines(), {{"b", "slow"}, {"a", "fast"}, {"a", "fast"}}, "gloo",
                                                 Precision::kMixed, "x"))
                            .dump());
  expect_rejected("measured rank 0 as slow on node 'b'; in this cluster it is fast on node 'a'");
  dir.Write("net.json", NetworkToJson(FitNetwork(ThreeLines(), ThreeRanks(), "gloo", Precision::kFp32, "x")).dump());
  expect_rejected("measured with fp32 payloads; this cluster trains in bf16");
  // `poplar network` itself reads the cluster file before the network file exists.
  dir.Write("net.json", "not json");
  const ClusterSpec unread = LoadClusterFile(cluster_file, ClusterRead::kNetworkElsewhere);
  EXPECT_FALSE(unread.measured_network.has_value());
  EXPECT_EQ(unread.measured_network_file, dir.path() + "/net.json");
}

TEST(ClusterMeasuredNetwork, AFlagCanStandInForTheClusterFilesNetwork) {
  // No network section at all: --network supplies it (plan, simulate, launch).
  ScratchDir dir("measured");
  const std::string cluster_file =
      dir.Write("cluster.yaml", std::string(kMeasuredCluster)
                                    .replace(std::string(kMeasuredCluster).find("network:"),
                                             std::string("network:\n  measured: net.json\n").size(), ""));
  EXPECT_THROW(LoadClusterFile(cluster_file), InputError);  // links are required otherwise
  ClusterSpec cluster = LoadClusterFile(cluster_file, ClusterRead::kNetworkElsewhere);
  try {
    cluster.Collectives();
    FAIL() << "charged a network that nobody declared or measured";
  } catch (const InputError& error) {
    EXPECT_EQ(error.key(), "network");
  }
  const std::string network = dir.Write(
      "other.json", NetworkToJson(FitNetwork(ThreeLines(), ThreeRanks(), "nccl", Precision::kMixed, "x")).dump());
  AttachMeasuredNetwork(cluster, network, "--network", "");
  EXPECT_NEAR(cluster.Collectives().reduce_scatter.Seconds(3e9), 60e-6 + 1.0, 1e-9);
  EXPECT_EQ(cluster.measured_network_file, network);
}

}  // namespace
}  // namespace poplar
