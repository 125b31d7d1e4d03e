#include "launcher/head/timeline.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "planner/base/median.h"
#include "planner/formats/metrics_record.h"

namespace poplar {
namespace {

// [start, wall, ...] as numbers, at least `size` of them and all finite; empty otherwise.
std::vector<double> Span(const nlohmann::json& span, std::size_t size) {
  if (!span.is_array() || span.size() < size) return {};
  std::vector<double> values;
  for (const auto& value : span) {
    if (!value.is_number() || !std::isfinite(value.get<double>())) return {};
    values.push_back(value.get<double>());
  }
  return values;
}

constexpr double kMicroseconds = 1e6;

nlohmann::json Slice(const std::string& name, const char* category, int rank, double start_s, double seconds,
                     nlohmann::json args = nlohmann::json::object()) {
  return {{"name", name},
          {"cat", category},
          {"ph", "X"},
          {"pid", 0},
          {"tid", rank},
          {"ts", start_s * kMicroseconds},
          {"dur", std::max(0.0, seconds) * kMicroseconds},
          {"args", std::move(args)}};
}

// Where each record's step starts on one time axis: its start_s, shifted past the
// attempts before when the job's clock started again (a resume, an elastic restart).
// Each rank's clock goes back at the first step of every attempt; the k-th attempt of
// every rank takes the shift of rank 0's k-th: a second after rank 0's attempt before
// it ended.
std::vector<std::vector<std::optional<double>>> Starts(const std::vector<RankRecords>& ranks) {
  // Per rank, each record's attempt (counted from 0) and start_s, or nothing.
  std::vector<std::vector<std::optional<std::pair<int, double>>>> placed;
  for (const RankRecords& rank : ranks) {
    auto& mine = placed.emplace_back();
    int attempt = 0;
    double last = -1;
    for (const nlohmann::json& record : rank.records) {
      const auto start = RecordNumber(record, "start_s");
      if (!start) {
        mine.push_back(std::nullopt);
        continue;
      }
      if (*start < last) ++attempt;
      last = *start;
      mine.emplace_back(std::make_pair(attempt, *start));
    }
  }
  std::vector<double> shifts = {0};  // per attempt
  double end = 0;
  if (!ranks.empty()) {
    for (std::size_t i = 0; i < ranks[0].records.size(); ++i) {
      if (!placed[0][i]) continue;
      const auto [attempt, start] = *placed[0][i];
      while (static_cast<int>(shifts.size()) <= attempt) shifts.push_back(end + 1.0);
      end = std::max(end, shifts[attempt] + start + RecordNumber(ranks[0].records[i], "step_s").value_or(0));
    }
  }
  std::vector<std::vector<std::optional<double>>> starts;
  for (const auto& mine : placed) {
    auto& out = starts.emplace_back();
    for (const auto& entry : mine) {
      if (!entry) {
        out.push_back(std::nullopt);
        continue;
      }
      out.push_back(entry->second + shifts[std::min<std::size_t>(entry->first, shifts.size() - 1)]);
    }
  }
  return starts;
}

}  // namespace

nlohmann::json TimelineTrace(const std::string& job_id, const std::vector<RankRecords>& ranks) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", "job " + job_id}}}});
  const auto starts = Starts(ranks);
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankRecords& rank = ranks[r];
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", rank.rank},
         {"args",
          {{"name", "rank " + std::to_string(rank.rank) + ": " + rank.device_type + " on node " + rank.node}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", rank.rank}, {"args", {{"sort_index", r}}}});
    for (std::size_t i = 0; i < rank.records.size(); ++i) {
      const nlohmann::json& record = rank.records[i];
      const auto step_s = RecordNumber(record, "step_s");
      if (!starts[r][i] || !step_s || !record.contains("spans") || !record["spans"].is_object()) continue;
      const double start = *starts[r][i];
      const nlohmann::json& spans = record["spans"];
      const double compute = RecordNumber(record, "compute_s").value_or(0);
      const double optimizer = RecordNumber(record, "optimizer_s").value_or(0);
      nlohmann::json args = {{"plan", record.value("plan", 0)},
                             {"samples", record.value("samples", 0)},
                             {"compute_ms", compute * 1e3},
                             {"optimizer_ms", optimizer * 1e3},
                             {"idle_ms", IdleSeconds(record).value_or(0) * 1e3}};
      if (const auto loss = RecordNumber(record, "loss")) args["loss"] = *loss;
      events.push_back(
          Slice("step " + std::to_string(record.value("step", 0)), "step", rank.rank, start, *step_s, std::move(args)));
      if (spans.contains("micro_batches") && spans["micro_batches"].is_array()) {
        int index = 0;
        for (const auto& entry : spans["micro_batches"]) {
          const std::vector<double> span = Span(entry, 4);
          if (span.empty()) continue;
          events.push_back(
              Slice("micro-batch " + std::to_string(index++) + " (" + std::to_string(static_cast<long long>(span[3])) +
                        " samples)",
                    "compute", rank.rank, start + span[0], span[1],
                    {{"compute_ms", span[2] * 1e3}, {"waited_ms", std::max(0.0, span[1] - span[2]) * 1e3}}));
        }
      }
      for (const auto& [key, name, category] : {std::tuple{"optimizer", "optimizer", "optimizer"},
                                                std::tuple{"loss_all_reduce", "loss all-reduce", "sync"}}) {
        if (!spans.contains(key)) continue;
        const std::vector<double> span = Span(spans[key], 2);
        if (!span.empty()) events.push_back(Slice(name, category, rank.rank, start + span[0], span[1]));
      }
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

PredictedBusy ReadPredictedBusy(const std::string& run_dir) {
  PredictedBusy predicted;
  const auto read = [&](int plan, const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) return;
    const nlohmann::json json = nlohmann::json::parse(in, nullptr, false);
    if (!json.is_object() || !json.contains("device_types") || !json["device_types"].is_array()) return;
    for (const nlohmann::json& type : json["device_types"]) {
      const auto busy = RecordNumber(type, "busy_s");
      if (type.is_object() && type.contains("type") && type["type"].is_string() && busy && *busy > 0) {
        predicted[plan][type["type"].get<std::string>()] = *busy;
      }
    }
  };
  const std::filesystem::path dir(run_dir);
  read(0, dir / "plan.json");
  for (int plan = 1;; ++plan) {
    const std::filesystem::path file = dir / "plans" / ("plan-" + std::to_string(plan) + ".json");
    if (!std::filesystem::exists(file)) break;
    read(plan, file);
  }
  return predicted;
}

nlohmann::json StragglerReport(const std::vector<RankRecords>& ranks, const PredictedBusy& predicted) {
  std::vector<int> order;                                          // plans in the order they first trained
  std::map<int, std::int64_t> steps;                               // plan -> rank 0's steps of it
  std::map<int, std::map<std::size_t, std::vector<double>>> idle;  // plan -> rank index -> idle shares
  std::map<int, std::map<std::string, std::vector<double>>> busy;  // plan -> device type -> compute_s
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::optional<int> previous;
    for (const nlohmann::json& record : ranks[r].records) {
      const auto plan = RecordNumber(record, "plan");
      const auto step_s = RecordNumber(record, "step_s");
      if (!plan || !step_s || *step_s <= 0) continue;
      const int number = static_cast<int>(*plan);
      if (std::find(order.begin(), order.end(), number) == order.end()) order.push_back(number);
      if (r == 0) ++steps[number];
      const bool first_of_plan = previous != number;
      previous = number;
      if (first_of_plan) continue;  // a warm-up
      if (const auto idle_s = IdleSeconds(record)) idle[number][r].push_back(std::min(1.0, *idle_s / *step_s));
      if (const auto compute_s = RecordNumber(record, "compute_s"))
        busy[number][ranks[r].device_type].push_back(*compute_s);
    }
  }
  nlohmann::json report = nlohmann::json::array();
  for (const int plan : order) {
    nlohmann::json shares = nlohmann::json::object();
    std::optional<std::size_t> straggler;
    double least = 2;
    for (const auto& [r, values] : idle[plan]) {
      const double share = Median(values);
      shares[std::to_string(ranks[r].rank)] = share;
      if (share < least) {
        least = share;
        straggler = r;
      }
    }
    nlohmann::json entry = {{"plan", plan}, {"steps", steps[plan]}, {"idle_share", shares}};
    if (straggler) {
      const RankRecords& rank = ranks[*straggler];
      entry["straggler"] = {
          {"rank", rank.rank}, {"device_type", rank.device_type}, {"node", rank.node}, {"idle_share", least}};
    }
    const auto said = predicted.find(plan);
    if (said != predicted.end()) {
      nlohmann::json measured_busy = nlohmann::json::object();
      for (const auto& [type, predicted_s] : said->second) {
        const auto values = busy[plan].find(type);
        if (values == busy[plan].end() || values->second.empty()) continue;
        const double measured_s = Median(values->second);
        measured_busy[type] = {
            {"measured_s", measured_s}, {"predicted_s", predicted_s}, {"ratio", measured_s / predicted_s}};
      }
      if (!measured_busy.empty()) entry["busy"] = std::move(measured_busy);
    }
    report.push_back(std::move(entry));
  }
  return report;
}

std::vector<RankRecords> ReadRankRecords(const std::string& run_dir, const std::vector<std::string>& nodes,
                                         const std::vector<std::string>& device_types) {
  std::vector<RankRecords> ranks;
  for (std::size_t r = 0; r < nodes.size(); ++r) {
    RankRecords& rank = ranks.emplace_back();
    rank.rank = static_cast<int>(r);
    rank.node = nodes[r];
    rank.device_type = r < device_types.size() ? device_types[r] : "";
    std::ifstream in(std::filesystem::path(run_dir) / "metrics" / ("rank-" + std::to_string(r) + ".jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (record.is_object()) rank.records.push_back(std::move(record));
    }
  }
  return ranks;
}

}  // namespace poplar
