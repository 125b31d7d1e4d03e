// The network as the cost model sees it: how long each collective takes for a payload
// of B bytes. Two sources (docs/cost-model.md, "Communication"):
//   - a link declared in the cluster file: rings over it, the all-reduce at a tree's
//     latency where that is less (CollectiveTimes::OverLink);
//   - a measurement on the cluster itself, `poplar network`: for each collective a line
//     fitted to timed runs of the real backend (MeasuredNetwork, the network file).
// The payload is the caller's tensor: an all-reduce's tensor, a reduce-scatter's input,
// an all-gather's output (as the worker's metrics count bytes).
#pragma once

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/formats/precision.h"

namespace poplar {

// Bounds on a link's rate and fixed cost, declared (cluster file) or fitted (network
// file): slower than a megabit or faster than a petabit per second, or more than ten
// seconds per collective, is a typing mistake, and beyond them the cost model's times
// lose meaning (1e308 Gb/s is infinite bytes per second).
inline constexpr double kLeastLinkGbps = 0.001;
inline constexpr double kMostLinkGbps = 1e6;
inline constexpr double kMostLinkLatencyUs = 1e7;

// One link class of the network, as the cluster file declares it.
struct LinkSpec {
  double bandwidth_bytes_per_s = 0;  // one direction, per device
  double latency_s = 0;              // per message hop
};

enum class Collective { kAllReduce, kReduceScatter, kAllGather };
inline constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kReduceScatter,
                                              Collective::kAllGather};
// "all_reduce", "reduce_scatter", "all_gather": the names in network files and in the
// worker's measurement lines.
std::string CollectiveName(Collective collective);
std::optional<Collective> ParseCollectiveName(const std::string& name);

// seconds = fixed_s + payload bytes / payload_bytes_per_s.
struct CollectiveLine {
  double fixed_s = 0;
  double payload_bytes_per_s = std::numeric_limits<double>::infinity();
  double Seconds(double bytes) const { return fixed_s + bytes / payload_bytes_per_s; }
};

struct CollectiveTimes {
  CollectiveLine all_reduce, reduce_scatter, all_gather;

  const CollectiveLine& Of(Collective collective) const;
  CollectiveLine& Of(Collective collective);
  // A declared `link` among `ranks` ranks, for B payload bytes: rings, except that the
  // all-reduce pays a tree's latency where that is less (NCCL runs small all-reduces
  // as a double binary tree: 2 ceil(log2 N) hops instead of the ring's 2 (N-1)):
  //   all-reduce      2 (N-1)/N * B/W + 2 min(N-1, ceil(log2 N)) a
  //   reduce-scatter    (N-1)/N * B/W +   (N-1) a
  //   all-gather        (N-1)/N * B/W +   (N-1) a
  // With one rank every collective is free.
  static CollectiveTimes OverLink(const LinkSpec& link, int ranks);
};

// One timed collective: the slowest rank's time, the median over repetitions.
struct CollectivePoint {
  Collective collective = Collective::kAllReduce;
  double bytes = 0;
  double seconds = 0;
};

// The line through one collective's points that minimises the squared *relative*
// residuals (so that 4 KiB and 64 MiB weigh alike), with fixed_s >= 0 and a rate within
// kLeastLinkGbps to kMostLinkGbps (the fastest where time does not grow with size). Throws InputError(file, key) unless
// there are points at two or more sizes.
CollectiveLine FitCollectiveLine(const std::vector<CollectivePoint>& points, Collective collective,
                                 const std::string& file, const std::string& key);

// A rank that took part in a measurement: where it ran.
struct NetworkRank {
  std::string node;
  std::string device_type;
  bool operator==(const NetworkRank& other) const { return node == other.node && device_type == other.device_type; }
};

// A network file: what `poplar network` measured and fitted on one cluster.
struct MeasuredNetwork {
  std::string file;                        // where it was read from, for error messages
  std::vector<NetworkRank> ranks;          // every device of the cluster, in rank order
  std::string backend;                     // "gloo" or "nccl"
  Precision precision = Precision::kFp32;  // of the payload ("fp32" or "bf16" in the file)
  CollectiveTimes times;                   // the fitted lines
  std::vector<CollectivePoint> points;

  int world_size() const { return static_cast<int>(ranks.size()); }
  int nodes() const;  // distinct nodes among the ranks
  // The largest |fitted - measured| / measured over the points (of one collective).
  double WorstRelativeError() const;
  double WorstRelativeError(Collective collective) const;
};

// Fits every collective's line. Throws InputError(file) like FitCollectiveLine.
MeasuredNetwork FitNetwork(std::vector<CollectivePoint> points, std::vector<NetworkRank> ranks,
                           const std::string& backend, Precision precision, const std::string& file);

// The network file (docs/formats.md): {"format": "poplar-network/1", "ranks": [{"node",
// "device_type"}], "backend", "precision", "collectives": {name: {"fixed_us",
// "payload_gbps"}}, "worst_relative_error", "points": [{"collective", "bytes", "seconds"}]}.
nlohmann::ordered_json NetworkToJson(const MeasuredNetwork& network);
// Reads and validates. The planner uses the lines; the points are the evidence they
// were fitted to. Throws InputError naming the file and the key.
MeasuredNetwork ParseNetworkJson(const std::string& text, const std::string& file);
MeasuredNetwork LoadNetworkFile(const std::string& path);

// One measurement line of `poplar-worker network` (docs/worker.md):
// {"collective", "bytes", "seconds", "world_size", "backend"}. The worker writes it with
// MeasurementLineToJson; the head reads it back with ParseMeasurementLine, which throws
// InputError.
struct MeasurementLine {
  CollectivePoint point;
  int world_size = 0;
  std::string backend;
};
nlohmann::ordered_json MeasurementLineToJson(const MeasurementLine& line);
MeasurementLine ParseMeasurementLine(const std::string& json_line, const std::string& source);

}  // namespace poplar
