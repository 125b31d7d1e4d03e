#include "launcher/head/batch_chooser.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "planner/base/input_error.h"
#include "planner/base/text_table.h"
#include "planner/formats/metrics_record.h"
#include "planner/search/plan_file.h"

namespace poplar {

std::vector<std::int64_t> CandidateBatches(std::int64_t batch_min, std::int64_t batch_max, std::int64_t current) {
  std::vector<std::int64_t> batches = {batch_min, batch_max, current};
  const double ratio = std::pow(2.0, 0.25);
  for (double batch = static_cast<double>(batch_min) * ratio; batch < static_cast<double>(batch_max); batch *= ratio) {
    batches.push_back(static_cast<std::int64_t>(std::llround(batch)));
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  batches.erase(
      std::remove_if(batches.begin(), batches.end(), [&](std::int64_t b) { return b < batch_min || b > batch_max; }),
      batches.end());
  return batches;
}

bool MeasuresNoise(const WorkerPlan& plan) {
  int ranks_with_samples = 0;
  for (int rank = 0; rank < plan.WorldSize(); ++rank) {
    ranks_with_samples += plan.RankSamples(rank) > 0;
    if (plan.stage < 2) continue;
    for (const int size : plan.micro_batches[rank]) {
      if (size > 0 && size < plan.global_batch) return true;
    }
  }
  return plan.stage < 2 && ranks_with_samples >= 2;
}

double StatisticalEfficiency(double noise_scale, std::int64_t batch, std::int64_t current) {
  return (noise_scale + static_cast<double>(current)) / (noise_scale + static_cast<double>(batch));
}

BatchChooser::BatchChooser(ClusterSpec cluster, const WorkerPlan& plan, BatchChoiceOptions options)
    : cluster_(std::move(cluster)), options_(options), plan_(plan) {}

void BatchChooser::Handed(int number) { awaited_ = number; }

void BatchChooser::NotHanded() { proposed_.reset(); }

void BatchChooser::Following(const WorkerPlan& plan, int number) {
  proposed_ = plan;
  awaited_ = number;
}

std::optional<BatchChoice> BatchChooser::Metrics(int rank, const nlohmann::json& record, const Profiles& profiles) {
  if (rank != 0 || !record.is_object()) return std::nullopt;
  const auto plan = record.find("plan");
  const auto step = record.find("step");
  if (plan == record.end() || !plan->is_number_integer() || step == record.end() || !step->is_number_integer()) {
    return std::nullopt;
  }
  if (awaited_) {
    if (plan->get<int>() != *awaited_) return std::nullopt;
    // The judgements count a batch's steps: a new schedule of the same batch goes on counting.
    if (proposed_->global_batch != plan_.global_batch) since_judged_ = 0;
    plan_ = *proposed_;
    number_ = *awaited_;
    proposed_.reset();
    awaited_.reset();
  }
  if (proposed_ || plan->get<int>() != number_) return std::nullopt;
  if (++since_judged_ < options_.every) return std::nullopt;
  since_judged_ = 0;
  return Judge(step->get<std::int64_t>(), RecordNumber(record, "noise_scale").value_or(0), profiles());
}

std::optional<BatchChoice> BatchChooser::Judge(std::int64_t step, double noise_scale,
                                               const std::map<std::string, DeviceProfile>& profiles) {
  const std::int64_t now = plan_.global_batch;
  nlohmann::ordered_json judgement = {{"step", step}, {"noise_scale", noise_scale}, {"batch", now}};
  if (!(noise_scale > 0) || !std::isfinite(noise_scale)) {
    last_line_ = "step " + std::to_string(step) + ": batch " + std::to_string(now) +
                 " kept: no positive noise scale measured yet";
    judgement["chosen"] = now;
    judgement["reason"] = last_line_;
    if (record_) record_(judgement);
    return std::nullopt;
  }
  std::vector<BatchCandidate> candidates;
  std::map<std::int64_t, std::pair<std::string, WorkerPlan>> plans;  // batch -> its plan's text, parsed
  for (const std::int64_t batch : CandidateBatches(options_.batch_min, options_.batch_max, now)) {
    try {
      const Replan replan = ReplanRunningJob(cluster_, profiles, plan_, batch);
      std::string text = replan.plan.dump(2) + "\n";
      WorkerPlan plan = ParseWorkerPlan(text, "the adaptive batch's plan");
      if (!MeasuresNoise(plan)) continue;
      BatchCandidate candidate;
      candidate.batch = batch;
      candidate.step_s = replan.prediction.step_s;
      candidate.efficiency = StatisticalEfficiency(noise_scale, batch, now);
      candidate.goodput = static_cast<double>(batch) / candidate.step_s * candidate.efficiency;
      candidates.push_back(candidate);
      plans[batch] = {std::move(text), std::move(plan)};
    } catch (const InputError&) {
      // No schedule of the stage holds this batch on the devices as they are.
    }
  }
  const auto current = std::find_if(candidates.begin(), candidates.end(),
                                    [&](const BatchCandidate& candidate) { return candidate.batch == now; });
  const auto best = std::max_element(candidates.begin(), candidates.end(),
                                     [](const auto& a, const auto& b) { return a.goodput < b.goodput; });
  judgement["candidates"] = nlohmann::ordered_json::array();
  for (const BatchCandidate& candidate : candidates) {
    judgement["candidates"].push_back({{"batch", candidate.batch},
                                       {"step_s", candidate.step_s},
                                       {"samples_per_s", static_cast<double>(candidate.batch) / candidate.step_s},
                                       {"efficiency", candidate.efficiency},
                                       {"goodput", candidate.goodput}});
  }
  const std::int64_t steps_left = options_.last_step > 0 ? options_.last_step - step : options_.every;
  const bool better = current != candidates.end() && best != candidates.end() && best->batch != now &&
                      best->goodput > (1 + options_.min_gain) * current->goodput;
  const std::string noise_text = "noise scale " + Fixed(noise_scale, 1) + " samples";
  std::optional<BatchChoice> choice;
  if (better && steps_left >= options_.every) {
    choice.emplace();
    choice->global_batch = best->batch;
    choice->predicted_step_s = best->step_s;
    std::tie(choice->plan_text, choice->plan) = plans.at(best->batch);
    choice->reason =
        "adaptive batch: " + noise_text + "; batch " + std::to_string(now) + " -> " + std::to_string(best->batch) +
        ", goodput +" + Fixed(100 * (best->goodput / current->goodput - 1), 0) + "% (" +
        Fixed(static_cast<double>(best->batch) / best->step_s, 0) + " samples/s x " + Fixed(best->efficiency, 2) +
        " efficiency against " + Fixed(static_cast<double>(now) / current->step_s, 0) + " samples/s)";
    proposed_ = choice->plan;
    last_line_ = "step " + std::to_string(step) + ": " + choice->reason;
  } else {
    const std::int64_t best_batch = best != candidates.end() ? best->batch : now;
    last_line_ = "step " + std::to_string(step) + ": batch " + std::to_string(now) + " kept: " + noise_text +
                 (best_batch == now ? ", it has the best goodput"
                  : !better         ? ", batch " + std::to_string(best_batch) + " gains less than " +
                                  Fixed(100 * options_.min_gain, 0) + "%"
                            : ", too few steps left to gain from batch " + std::to_string(best_batch));
  }
  judgement["chosen"] = choice ? choice->global_batch : now;
  judgement["reason"] = last_line_;
  if (record_) record_(judgement);
  return choice;
}

}  // namespace poplar
