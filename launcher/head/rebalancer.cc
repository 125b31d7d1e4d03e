#include "launcher/head/rebalancer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "planner/base/input_error.h"
#include "planner/base/median.h"
#include "planner/base/text_table.h"
#include "planner/formats/metrics_record.h"
#include "planner/search/plan_file.h"

namespace poplar {
namespace {

// `profiles` with each type's compute and optimizer times multiplied by its correction.
std::map<std::string, DeviceProfile> Corrected(std::map<std::string, DeviceProfile> profiles,
                                               const std::map<std::string, double>& corrections) {
  for (auto& [type, profile] : profiles) {
    const auto found = corrections.find(type);
    if (found == corrections.end() || found->second == 1.0) continue;
    for (StageProfile& stage : profile.stages) {
      stage.optimizer_step_s *= found->second;
      if (stage.optimizer_fixed_s) *stage.optimizer_fixed_s *= found->second;
      for (ProfilePoint& point : stage.points) {
        point.compute_s *= found->second;
        point.graph_compute_s *= found->second;
      }
    }
  }
  return profiles;
}

}  // namespace

Rebalancer::Rebalancer(ClusterSpec cluster, std::map<std::string, DeviceProfile> profiles, const WorkerPlan& plan,
                       RebalanceOptions options)
    : cluster_(std::move(cluster)), profiles_(std::move(profiles)), options_(options) {
  for (const RankSlot& slot : cluster_.Ranks()) {
    rank_types_.push_back(slot.device_type);
    corrections_[slot.device_type] = 1.0;
  }
  Follow(plan, 0);
}

void Rebalancer::Follow(const WorkerPlan& plan, int number) {
  plan_ = plan;
  number_ = number;
  predicted_ = PredictRankCompute(AtGlobalBatch(cluster_, plan_.global_batch), profiles_, plan_);
  ratios_.assign(predicted_.size(), {});
  warmed_up_.assign(predicted_.size(), false);
}

void Rebalancer::Handed(int number) { awaited_ = number; }

void Rebalancer::NotHanded() { proposed_.reset(); }

void Rebalancer::Following(const WorkerPlan& plan, int number) {
  proposed_ = plan;
  awaited_ = number;
}

std::map<std::string, DeviceProfile> Rebalancer::CorrectedProfiles() const {
  return Corrected(profiles_, corrections_);
}

std::optional<Rebalance> Rebalancer::Metrics(int rank, const nlohmann::json& record) {
  if (rank < 0 || rank >= static_cast<int>(predicted_.size()) || !record.is_object()) return std::nullopt;
  const auto plan = record.find("plan");
  const auto step = RecordNumber(record, "step");
  const auto compute = RecordNumber(record, "compute_s");
  if (plan == record.end() || !plan->is_number_integer() || !step || !compute) return std::nullopt;
  step_ = std::max(step_, static_cast<std::int64_t>(*step));
  if (const auto switch_s = RecordNumber(record, "switch_s")) switch_cost_s_ = std::max(switch_cost_s_, *switch_s);
  if (awaited_) {
    if (plan->get<int>() != *awaited_) return std::nullopt;
    Follow(*proposed_, *awaited_);
    proposed_.reset();
    awaited_.reset();
  }
  if (proposed_ || plan->get<int>() != number_) return std::nullopt;
  if (!warmed_up_[rank]) {
    warmed_up_[rank] = true;  // the plan's first step: a warm-up, not measured
    return std::nullopt;
  }
  if (predicted_[rank] <= 0) return std::nullopt;
  std::deque<double>& window = ratios_[rank];
  window.push_back(*compute / predicted_[rank]);
  if (static_cast<int>(window.size()) > options_.window) window.pop_front();
  for (std::size_t r = 0; r < predicted_.size(); ++r) {
    if (predicted_[r] > 0 && static_cast<int>(ratios_[r].size()) < options_.window) return std::nullopt;
  }
  std::optional<Rebalance> proposal = Judge();
  if (record_) record_(last_judgement_);
  return proposal;
}

std::optional<Rebalance> Rebalancer::Judge() {
  std::map<std::string, double> measured;  // type -> its slowest rank's median ratio
  for (std::size_t r = 0; r < predicted_.size(); ++r) {
    if (predicted_[r] <= 0) continue;
    const double ratio = Median(std::vector<double>(ratios_[r].begin(), ratios_[r].end()));
    measured[rank_types_[r]] = std::max(measured[rank_types_[r]], ratio);
  }
  for (auto& window : ratios_) window.clear();  // the next judgement is of fresh steps
  std::string speeds;
  for (const auto& [type, ratio] : measured) {
    // A new speed counts once two windows in a row are off the correction the same way
    // (both slower, or both faster, past the band), at their mean: one window's reading
    // (a warm-up, a neighbour's burst) moves nothing, and a speed still drifting (a
    // load that grows) is followed rather than awaited.
    double& correction = corrections_[type];
    const auto candidate = candidates_.find(type);
    const double off = ratio / correction - 1.0;
    if (std::abs(off) <= options_.threshold) {
      candidates_.erase(type);
    } else if (candidate != candidates_.end() && (candidate->second / correction - 1.0) * off > 0) {
      correction = (ratio + candidate->second) / 2;
      candidates_.erase(candidate);
    } else {
      candidates_[type] = ratio;
    }
    speeds += (speeds.empty() ? "" : ", ") + type + " " + Fixed(ratio, 2) + "x";
  }
  nlohmann::ordered_json& judgement = last_judgement_ = nlohmann::ordered_json::object();
  judgement["step"] = step_;
  judgement["readings"] = measured;
  judgement["corrections"] = corrections_;
  judgement["awaiting"] = candidates_;
  const auto outcome = [&](const std::string& words) {
    judgement["outcome"] = words;
    return std::nullopt;
  };
  // A type whose new speed awaits its confirmation makes the picture half known: a plan
  // for the others' confirmed speeds and its old one could give it more work just as it
  // slows down. The next judgement confirms or drops the reading first.
  if (!candidates_.empty()) return outcome("a reading awaits its confirmation");
  Replan replan;
  try {
    replan = ReplanRunningJob(cluster_, CorrectedProfiles(), plan_);
  } catch (const InputError& error) {
    // No schedule of the stage fits the corrected profiles: the plan stays.
    return outcome("no plan fits the corrected profiles: " + error.reason());
  }
  const double gain_s = replan.running.step_s - replan.prediction.step_s;
  const std::int64_t steps_left = options_.last_step > 0 ? options_.last_step - step_ : 1'000'000;
  const std::string steps = "the running plan takes " + Seconds(replan.running.step_s) + " per step, the best " +
                            Seconds(replan.prediction.step_s);
  if (gain_s <= options_.min_gain * replan.running.step_s) return outcome(steps + ": too little to gain");
  if (gain_s * static_cast<double>(steps_left) <= switch_cost_s_) {
    return outcome(steps + ": the steps left gain less than the switch costs");
  }
  judgement["outcome"] = "proposed: " + steps;
  Rebalance rebalance;
  rebalance.plan_text = replan.plan.dump(2) + "\n";
  rebalance.predicted_step_s = replan.prediction.step_s;
  rebalance.reason = "compute against the profiles (median of " + std::to_string(options_.window) +
                     " steps): " + speeds + "; at these speeds the running plan takes " +
                     Seconds(replan.running.step_s) + " per step, the new one " + Seconds(replan.prediction.step_s);
  rebalance.plan = ParseWorkerPlan(rebalance.plan_text, "the rebalanced plan");
  proposed_ = rebalance.plan;
  return rebalance;
}

}  // namespace poplar
