#include "planner/formats/network.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

constexpr const char* kFormat = "poplar-network/1";
constexpr double kBitsPerByte = 8.0;
constexpr double kMostPointBytes = 1e15;  // a collective of a petabyte: beyond any payload measured

CollectiveLine RingLine(const LinkSpec& link, int ranks, double passes) {
  if (ranks <= 1) return {};
  const double hops = ranks - 1;
  return {passes * hops * link.latency_s, link.bandwidth_bytes_per_s * ranks / (passes * hops)};
}

Collective RequireCollective(JsonFields& fields, const std::string& key) {
  const std::string name = fields.String(key);
  const auto collective = ParseCollectiveName(name);
  if (!collective) fields.Fail(key, "must be all_reduce, reduce_scatter or all_gather, got '" + name + "'");
  return *collective;
}

// The fields a point shares with a measurement line; the caller finishes `fields`.
CollectivePoint ReadPoint(JsonFields& fields) {
  CollectivePoint point;
  point.collective = RequireCollective(fields, "collective");
  // Whole bytes, up to a petabyte; a whole number written as a float (4096.0) too.
  point.bytes = fields.NumberIn("bytes", 1, kMostPointBytes, "a whole number of bytes from 1 to 10^15");
  if (point.bytes != std::floor(point.bytes)) {
    fields.Fail("bytes", "must be a whole number of bytes, got " + nlohmann::json(point.bytes).dump());
  }
  point.seconds = fields.Number("seconds");
  if (!(point.seconds > 0)) fields.Fail("seconds", "must be a positive number of seconds");
  return point;
}

nlohmann::ordered_json PointToJson(const CollectivePoint& point) {
  return {{"collective", CollectiveName(point.collective)},
          {"bytes", static_cast<std::int64_t>(point.bytes)},
          {"seconds", point.seconds}};
}

CollectivePoint ParsePoint(JsonFields fields) {
  const CollectivePoint point = ReadPoint(fields);
  fields.Finish();
  return point;
}

CollectiveLine ParseLine(JsonFields fields) {
  CollectiveLine line;
  const double fixed_us = fields.Number("fixed_us");
  if (!(fixed_us >= 0 && fixed_us <= kMostLinkLatencyUs)) {
    fields.Fail("fixed_us", "must be a number of microseconds from 0 to 10000000");
  }
  line.fixed_s = fixed_us * 1e-6;
  const double gbps = fields.Number("payload_gbps");
  if (!(gbps >= kLeastLinkGbps && gbps <= kMostLinkGbps)) {
    fields.Fail("payload_gbps", "must be a number of gigabits per second from 0.001 to 1000000");
  }
  line.payload_bytes_per_s = gbps * 1e9 / kBitsPerByte;
  fields.Finish();
  return line;
}

int PositiveCount(JsonFields& fields, const std::string& key, const std::string& what) {
  return static_cast<int>(fields.IntegerIn(key, 1, 100'000'000, "a number of " + what));
}

std::string RequireBackend(JsonFields& fields) {
  const std::string backend = fields.String("backend");
  if (backend != "gloo" && backend != "nccl") fields.Fail("backend", "must be gloo or nccl, got '" + backend + "'");
  return backend;
}

}  // namespace

std::string CollectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllGather:
      return "all_gather";
  }
  return "?";
}

std::optional<Collective> ParseCollectiveName(const std::string& name) {
  for (Collective collective : kCollectives) {
    if (CollectiveName(collective) == name) return collective;
  }
  return std::nullopt;
}

const CollectiveLine& CollectiveTimes::Of(Collective collective) const {
  switch (collective) {
    case Collective::kAllReduce:
      return all_reduce;
    case Collective::kReduceScatter:
      return reduce_scatter;
    case Collective::kAllGather:
      break;
  }
  return all_gather;
}

CollectiveLine& CollectiveTimes::Of(Collective collective) {
  return const_cast<CollectiveLine&>(static_cast<const CollectiveTimes&>(*this).Of(collective));
}

CollectiveTimes CollectiveTimes::OverLink(const LinkSpec& link, int ranks) {
  CollectiveLine all_reduce = RingLine(link, ranks, 2.0);
  if (ranks > 1) {
    const double tree_hops = std::ceil(std::log2(static_cast<double>(ranks)));
    all_reduce.fixed_s = std::min(all_reduce.fixed_s, 2.0 * tree_hops * link.latency_s);
  }
  return {all_reduce, RingLine(link, ranks, 1.0), RingLine(link, ranks, 1.0)};
}

CollectiveLine FitCollectiveLine(const std::vector<CollectivePoint>& points, Collective collective,
                                 const std::string& file, const std::string& key) {
  // Weighted least squares for t ~ f + r*B with weights 1/t^2 (relative residuals).
  double sw = 0, sb = 0, sbb = 0, st = 0, sbt = 0;
  std::set<double> sizes;
  for (const CollectivePoint& point : points) {
    if (point.collective != collective) continue;
    const double w = 1.0 / (point.seconds * point.seconds);
    sw += w;
    sb += w * point.bytes;
    sbb += w * point.bytes * point.bytes;
    st += w * point.seconds;
    sbt += w * point.bytes * point.seconds;
    sizes.insert(point.bytes);
  }
  if (sizes.size() < 2) {
    throw InputError(
        file, key,
        CollectiveName(collective) + " needs measurements at two or more sizes, has " + std::to_string(sizes.size()));
  }
  const double det = sw * sbb - sb * sb;
  double fixed = (sbb * st - sb * sbt) / det;
  double rate = (sw * sbt - sb * st) / det;  // seconds per byte
  if (fixed < 0) {                           // the best line through the origin
    fixed = 0;
    rate = sbt / sbb;
  }
  // Within the network file's range (kLeastLinkGbps to kMostLinkGbps), which the file
  // must read back: a slope beyond it is noise, chiefly no size dependence measurable
  // (times that fall with size on a busy host; the fastest rate then), and the fixed
  // cost is refitted under it.
  const double fastest = 1.0 / (kMostLinkGbps * 1e9 / kBitsPerByte);  // seconds per byte
  const double slowest = 1.0 / (kLeastLinkGbps * 1e9 / kBitsPerByte);
  if (!(rate >= fastest && rate <= slowest)) {
    rate = rate > slowest ? slowest : fastest;
    fixed = std::max(0.0, (st - rate * sb) / sw);
  }
  return {fixed, 1.0 / rate};
}

int MeasuredNetwork::nodes() const {
  std::set<std::string> names;
  for (const NetworkRank& rank : ranks) names.insert(rank.node);
  return static_cast<int>(names.size());
}

double MeasuredNetwork::WorstRelativeError(Collective collective) const {
  double worst = 0;
  for (const CollectivePoint& point : points) {
    if (point.collective != collective) continue;
    const double fitted = times.Of(point.collective).Seconds(point.bytes);
    worst = std::max(worst, std::abs(fitted - point.seconds) / point.seconds);
  }
  return worst;
}

double MeasuredNetwork::WorstRelativeError() const {
  double worst = 0;
  for (Collective collective : kCollectives) worst = std::max(worst, WorstRelativeError(collective));
  return worst;
}

MeasuredNetwork FitNetwork(std::vector<CollectivePoint> points, std::vector<NetworkRank> ranks,
                           const std::string& backend, Precision precision, const std::string& file) {
  MeasuredNetwork network;
  network.file = file;
  network.ranks = std::move(ranks);
  network.backend = backend;
  network.precision = precision;
  for (Collective collective : kCollectives) {
    network.times.Of(collective) = FitCollectiveLine(points, collective, file, "points");
  }
  network.points = std::move(points);
  return network;
}

nlohmann::ordered_json NetworkToJson(const MeasuredNetwork& network) {
  nlohmann::ordered_json lines = nlohmann::ordered_json::object();
  for (Collective collective : kCollectives) {
    const CollectiveLine& line = network.times.Of(collective);
    lines[CollectiveName(collective)] = {{"fixed_us", line.fixed_s * 1e6},
                                         {"payload_gbps", line.payload_bytes_per_s * kBitsPerByte / 1e9}};
  }
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (const CollectivePoint& point : network.points) {
    points.push_back(PointToJson(point));
  }
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const NetworkRank& rank : network.ranks)
    ranks.push_back({{"node", rank.node}, {"device_type", rank.device_type}});
  return {{"format", kFormat},
          {"ranks", ranks},
          {"backend", network.backend},
          {"precision", WorkerPrecisionName(network.precision)},
          {"collectives", lines},
          {"worst_relative_error", network.WorstRelativeError()},
          {"points", points}};
}

MeasuredNetwork ParseNetworkJson(const std::string& text, const std::string& file) {
  const nlohmann::json root = ParseJsonObject(text, file);
  JsonFields fields(root, file, "");
  if (fields.String("format") != kFormat) fields.Fail("format", std::string("must be \"") + kFormat + "\"");
  MeasuredNetwork network;
  network.file = file;
  const nlohmann::json& ranks =
      fields.List("ranks", 2, "a list of the two or more ranks measured, as {node, device_type}");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    JsonFields rank(ranks[i], file, "ranks[" + std::to_string(i) + "]");
    network.ranks.push_back({rank.String("node"), rank.String("device_type")});
    rank.Finish();
  }
  network.backend = RequireBackend(fields);
  const std::string precision = fields.String("precision");
  const std::optional<Precision> named = WorkerPrecisionNamed(precision);
  if (!named) fields.Fail("precision", "must be fp32 or bf16, got '" + precision + "'");
  network.precision = *named;
  JsonFields lines = fields.Map("collectives");
  for (Collective collective : kCollectives) {
    network.times.Of(collective) = ParseLine(lines.Map(CollectiveName(collective)));
  }
  lines.Finish();
  // Informational (recomputed from the points), but a relative error is never negative.
  if (fields.Number("worst_relative_error") < 0) fields.Fail("worst_relative_error", "must be zero or positive");
  const nlohmann::json& points = fields.List("points", 0, "a list of {collective, bytes, seconds}");
  for (std::size_t i = 0; i < points.size(); ++i) {
    network.points.push_back(ParsePoint(JsonFields(points[i], file, "points[" + std::to_string(i) + "]")));
  }
  fields.Finish();
  return network;
}

MeasuredNetwork LoadNetworkFile(const std::string& path) { return ParseNetworkJson(ReadTextFile(path), path); }

nlohmann::ordered_json MeasurementLineToJson(const MeasurementLine& line) {
  nlohmann::ordered_json json = PointToJson(line.point);
  json["world_size"] = line.world_size;
  json["backend"] = line.backend;
  return json;
}

MeasurementLine ParseMeasurementLine(const std::string& json_line, const std::string& source) {
  const nlohmann::json root = ParseJsonObject(json_line, source);
  JsonFields fields(root, source, "");
  MeasurementLine line;
  line.point = ReadPoint(fields);
  line.world_size = PositiveCount(fields, "world_size", "ranks");
  line.backend = RequireBackend(fields);
  fields.Finish();
  return line;
}

}  // namespace poplar
