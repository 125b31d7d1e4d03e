#include "agent/prometheus.h"

#include <functional>
#include <optional>
#include <sstream>
#include <utility>

#include "planner/base/number_text.h"
#include "planner/formats/metrics_record.h"

namespace poplar {
namespace {

std::string Escaped(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{node="...",key="value",...}`.
std::string Labels(const std::string& node, const std::vector<std::pair<std::string, std::string>>& labels) {
  std::string out = "{node=\"" + Escaped(node) + "\"";
  for (const auto& [key, value] : labels) out += "," + key + "=\"" + Escaped(value) + "\"";
  return out + "}";
}

void Header(std::ostringstream& out, const std::string& name, const std::string& help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
}

}  // namespace

std::string PrometheusText(const std::string& node, const std::vector<DeviceState>& devices,
                           const std::vector<RankState>& ranks) {
  std::ostringstream out;
  Header(out, "poplar_device_busy", "Whether a job or a profile holds the device (1) or not (0).");
  for (const DeviceState& device : devices) {
    out << "poplar_device_busy" << Labels(node, {{"device", device.device}, {"type", device.type}}) << " "
        << (device.busy ? 1 : 0) << "\n";
  }
  Header(out, "poplar_device_memory_bytes", "The memory the device offers, in bytes.");
  for (const DeviceState& device : devices) {
    out << "poplar_device_memory_bytes" << Labels(node, {{"device", device.device}, {"type", device.type}}) << " "
        << device.memory_bytes << "\n";
  }
  Header(out, "poplar_device_job", "The job that holds the device (1).");
  for (const DeviceState& device : devices) {
    if (device.job.empty()) continue;
    out << "poplar_device_job" << Labels(node, {{"device", device.device}, {"type", device.type}, {"job", device.job}})
        << " 1\n";
  }
  // A running job's local ranks, from their latest records.
  struct Gauge {
    const char* name;
    const char* help;
    std::function<std::optional<double>(const nlohmann::json&)> value;
  };
  const std::vector<Gauge> gauges = {
      {"poplar_rank_step", "The last step the rank reported.", [](const auto& r) { return RecordNumber(r, "step"); }},
      {"poplar_rank_step_seconds", "Its step's wall time.", [](const auto& r) { return RecordNumber(r, "step_s"); }},
      {"poplar_rank_samples_per_second", "The job's global batch over the step's time.",
       [](const auto& r) { return RecordNumber(r, "samples_per_s"); }},
      {"poplar_rank_loss", "The step's mean loss over the global batch.",
       [](const auto& r) { return RecordNumber(r, "loss"); }},
      {"poplar_rank_compute_seconds", "The rank's micro-batches' compute in the step.",
       [](const auto& r) { return RecordNumber(r, "compute_s"); }},
      {"poplar_rank_communication_seconds", "What the rank waited in collectives in the step.",
       [](const auto& r) { return RecordNumber(r, "communication_s"); }},
      {"poplar_rank_idle_seconds", "The step's time the rank neither computed nor stepped the optimizer.", IdleSeconds},
  };
  for (const Gauge& gauge : gauges) {
    Header(out, gauge.name, gauge.help);
    for (const RankState& rank : ranks) {
      if (!rank.record.is_object()) continue;
      if (const auto value = gauge.value(rank.record)) {
        out << gauge.name << Labels(node, {{"job", rank.job}, {"rank", std::to_string(rank.rank)}}) << " "
            << ShortestText(*value) << "\n";
      }
    }
  }
  return out.str();
}

}  // namespace poplar
