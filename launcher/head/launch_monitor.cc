#include "launcher/head/launch_monitor.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <utility>

#include "planner/base/command_failed.h"
#include "planner/base/median.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/formats/metrics_record.h"
#include "planner/formats/step_cadence.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

constexpr double kNoNumber = std::numeric_limits<double>::quiet_NaN();

// A record's number at `key`, or `otherwise` where it has none (RecordNumber).
double NumberOf(const nlohmann::json& record, const char* key, double otherwise = 0.0) {
  return RecordNumber(record, key).value_or(otherwise);
}

// A record's held-out loss (val_loss), where its step was evaluated.
std::optional<double> HeldOutLoss(const nlohmann::json& record) { return RecordNumber(record, "val_loss"); }

}  // namespace

std::string LaunchMonitor::NodeOf(int rank) const {
  return rank >= 0 && rank < static_cast<int>(ranks_.size()) ? ranks_[rank].node : "?";
}

LaunchMonitor::LaunchMonitor(std::string run_dir, std::vector<RankInfo> ranks, std::int64_t steps, int progress_every,
                             std::ostream& out)
    : files_(run_dir),
      ranks_(std::move(ranks)),
      steps_(steps),
      progress_every_(progress_every),
      out_(out),
      run_dir_(std::move(run_dir)) {}

void LaunchMonitor::PlanSwitch(const std::string& json_text) {
  const auto announced = nlohmann::json::parse(json_text, nullptr, false);
  if (!announced.is_object() || !announced.contains("number") || !announced["number"].is_number_integer()) return;
  const int number = announced["number"].get<int>();
  plans_handed_[number] = announced;
  const std::string reason = announced.value("reason", "");
  out_ << "plan " << number << " handed to rank 0" << (reason.empty() ? "" : ": " + reason) << std::endl;
  if (run_dir_.empty() || !announced.contains("plan")) return;
  const fs::path plans = fs::path(run_dir_) / "plans";
  fs::create_directories(plans);
  WriteFileAtomically((plans / ("plan-" + std::to_string(number) + ".json")).string(),
                      announced["plan"].dump(2) + "\n");
}

void LaunchMonitor::FollowPlan(const nlohmann::json& record, std::int64_t step) {
  const auto found = record.find("plan");
  if (found == record.end() || !found->is_number_integer() || found->get<int>() == plan_) return;
  const int number = found->get<int>();
  nlohmann::ordered_json entry = {{"plan", number}, {"from_step", step}};
  std::optional<double> predicted;
  std::string reason;
  if (const auto handed = plans_handed_.find(number); handed != plans_handed_.end()) {
    reason = handed->second.value("reason", "");
    const nlohmann::json& plan = handed->second.value("plan", nlohmann::json::object());
    if (plan.contains("predicted") && plan["predicted"].is_object()) {
      const double step_s = NumberOf(plan["predicted"], "step_s", kNoNumber);
      if (std::isfinite(step_s) && step_s > 0) predicted = step_s;
    }
  }
  if (predicted) entry["predicted_step_s"] = *predicted;
  if (predicted_step_s_) entry["previous_predicted_step_s"] = *predicted_step_s_;
  // What receiving the plan took, in the step before (its record says so).
  if (rank0_steps_.size() >= 2) {
    const nlohmann::json& before = rank0_steps_[rank0_steps_.size() - 2];
    if (before.contains("switch_s")) entry["switch_s"] = NumberOf(before, "switch_s");
  }
  entry["reason"] = reason;
  out_ << "step " << step << ": plan " << number << " trains from here"
       << (predicted ? ", predicted " + Seconds(*predicted) + " per step" : std::string())
       << (predicted_step_s_ ? " (was " + Seconds(*predicted_step_s_) + ")" : std::string())
       << (reason.empty() ? "" : ": " + reason) << std::endl;
  switches_.push_back(entry);
  plan_ = number;
  plan_since_ = rank0_steps_.size() - 1;
  predicted_step_s_ = predicted;
  if (!run_dir_.empty()) {
    WriteFileAtomically((fs::path(run_dir_) / "plan_switches.json").string(), switches_.dump(2) + "\n");
  }
}

void LaunchMonitor::Output(int rank, const std::string& line) {
  files_.Log(rank, line);
  if (line.rfind("poplar-worker", 0) == 0 && line.find(": warning: ") != std::string::npos) {
    out_ << "node '" << NodeOf(rank) << "': " << line << std::endl;
  }
}

void LaunchMonitor::Metrics(int rank, const std::string& json_line) {
  files_.Metrics(rank, json_line);
  auto record = nlohmann::json::parse(json_line, nullptr, false);
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) return;
  latest_[rank] = record;
  if (rank != 0) return;
  const bool first = rank0_steps_.empty();
  rank0_steps_.push_back(record);
  const std::int64_t step = record["step"].get<std::int64_t>();
  FollowPlan(record, step);
  if (first && step > 1) {
    out_ << "resumed from the checkpoint of step " << step - 1 << std::endl;
  } else if (first && !resume_job_.empty()) {
    out_ << "no node held a checkpoint of job " << resume_job_ << ": training starts from step 0" << std::endl;
  }
  if (progress_every_ > 0 && (DueAfterStep(step, progress_every_, steps_) || first || HeldOutLoss(record))) {
    out_ << ProgressLine(step) << std::endl;
  }
}

std::map<std::string, double> LaunchMonitor::BusyShares() const {
  std::map<std::string, std::pair<double, int>> sums;  // type -> (sum of shares, ranks)
  for (const auto& [rank, latest] : latest_) {
    const double step_s = NumberOf(latest, "step_s");
    if (step_s <= 0 || rank >= static_cast<int>(ranks_.size())) continue;
    auto& entry = sums[ranks_[rank].device_type];
    entry.first += std::min(1.0, NumberOf(latest, "compute_s") / step_s);
    entry.second += 1;
  }
  std::map<std::string, double> shares;
  for (const auto& [type, entry] : sums) shares[type] = entry.first / entry.second;
  return shares;
}

std::string LaunchMonitor::ProgressLine(std::int64_t step) const {
  const auto& record = rank0_steps_.back();
  std::string line = "step " + std::to_string(step) + "/" + std::to_string(steps_) + "  loss " +
                     Fixed(NumberOf(record, "loss", kNoNumber), 4);
  // The step's learning rate, from workers that report it.
  if (const double lr = NumberOf(record, "lr", kNoNumber); !std::isnan(lr)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2e", lr);
    line += std::string("  lr ") + text;
  }
  if (const auto val_loss = HeldOutLoss(record)) line += "  val loss " + Fixed(*val_loss, 4);
  line += "  " + Fixed(NumberOf(record, "samples_per_s"), 1) + " samples/s" + "  step " +
          Seconds(NumberOf(record, "step_s")) + "  busy";
  for (const auto& [type, share] : BusyShares()) line += " " + type + " " + Fixed(100.0 * share, 0) + "%";
  return line;
}

void LaunchMonitor::Failure(const std::string& node, const std::string& reason, std::optional<int> exit_status) {
  causes_.Failure(node, reason, exit_status);
}

bool LaunchMonitor::CheckpointDue(std::int64_t checkpoint_every) const {
  const std::int64_t first = rank0_steps_.empty() ? 0 : rank0_steps_.front().value("step", 0);
  const std::int64_t last = rank0_steps_.empty() ? 0 : rank0_steps_.back().value("step", 0);
  // A resume went on from a checkpoint, or meant to (a resume that failed before its
  // first step reported none); either way those stay.
  const bool resumed = first > 1 || !resume_job_.empty();
  // The last step writes one too: a job shorter than checkpoint_every has it due there.
  const std::int64_t first_due = checkpoint_every > 0 ? std::min(checkpoint_every, steps_) : steps_;
  return resumed || (checkpoint_every > 0 && last >= first_due);
}

std::optional<std::int64_t> LaunchMonitor::LastGlobalBatch() const {
  if (rank0_steps_.empty()) return std::nullopt;
  const auto batch = rank0_steps_.back().find("global_batch");
  if (batch == rank0_steps_.back().end() || !batch->is_number_integer()) return std::nullopt;
  return batch->get<std::int64_t>();
}

std::optional<std::pair<int, std::string>> LaunchMonitor::PlanTrained() const {
  const auto handed = plans_handed_.find(plan_);
  if (plan_ == 0 || handed == plans_handed_.end() || !handed->second.contains("plan")) return std::nullopt;
  return std::make_pair(plan_, handed->second["plan"].dump(2) + "\n");
}

std::string LaunchMonitor::CheckpointsKept(std::int64_t checkpoint_every, const std::string& where) const {
  const std::int64_t last = rank0_steps_.empty() ? 0 : rank0_steps_.back().value("step", 0);
  const std::int64_t first_due = checkpoint_every > 0 ? std::min(checkpoint_every, steps_) : steps_;
  if (CheckpointDue(checkpoint_every)) {
    // Rank 0 writes in the background: one due may not have been completed.
    return "the checkpoints rank 0's node completed" +
           (checkpoint_every == 1  ? std::string(" (every step)")
            : checkpoint_every > 1 ? " (every " + std::to_string(checkpoint_every) + " steps)"
                                   : std::string()) +
           " stay in " + where;
  }
  return checkpoint_every > 0
             ? "no checkpoint was due by step " + std::to_string(last) +
                   ", the last the head heard of (the first is due at step " + std::to_string(first_due) + ")"
             : "no checkpoint was due (job.checkpoint_every is 0: only the end writes one)";
}

nlohmann::ordered_json LaunchMonitor::Summary() const {
  nlohmann::ordered_json summary;
  summary["steps"] = rank0_steps_.empty() ? 0 : rank0_steps_.back().value("step", 0);
  if (rank0_steps_.empty()) return summary;
  const double predicted_step_s = predicted_step_s_.value_or(0);
  std::vector<double> step_times;
  const std::size_t trained = rank0_steps_.size() - plan_since_;
  for (std::size_t i = plan_since_ + trained / 5; i < rank0_steps_.size(); ++i) {
    step_times.push_back(NumberOf(rank0_steps_[i], "step_s"));
  }
  const double measured = Median(step_times);
  const double global_batch = NumberOf(rank0_steps_.back(), "samples_per_s") * NumberOf(rank0_steps_.back(), "step_s");
  summary["first_step"] = rank0_steps_.front().value("step", 0);
  summary["first_loss"] = NumberOf(rank0_steps_.front(), "loss", kNoNumber);
  summary["last_loss"] = NumberOf(rank0_steps_.back(), "loss", kNoNumber);
  summary["measured_step_s"] = measured;
  summary["predicted_step_s"] = predicted_step_s;
  summary["prediction_error"] = predicted_step_s > 0 && measured > 0 ? predicted_step_s / measured - 1 : 0.0;
  summary["samples_per_s"] = measured > 0 ? global_batch / measured : 0.0;
  nlohmann::ordered_json busy = nlohmann::ordered_json::object();
  for (const auto& [type, share] : BusyShares()) busy[type] = share;
  summary["busy_share"] = busy;
  summary["plan"] = plan_;
  summary["plan_switches"] = switches_;
  for (auto record = rank0_steps_.rbegin(); record != rank0_steps_.rend(); ++record) {
    if (const auto val_loss = HeldOutLoss(*record)) {
      summary["val_loss"] = *val_loss;
      summary["val_step"] = record->value("step", 0);
      break;
    }
  }
  return summary;
}

}  // namespace poplar
