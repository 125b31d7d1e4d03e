#include "planner/formats/worker_plan.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"

namespace poplar {

std::int64_t WorkerPlan::RankSamples(int rank) const {
  const auto& list = micro_batches.at(rank);
  return std::accumulate(list.begin(), list.end(), std::int64_t{0});
}

std::string WorkerPlan::RankKey(int rank) const {
  const std::size_t r = static_cast<std::size_t>(rank);
  return "ranks[" + std::to_string(r < entry_of_rank.size() ? entry_of_rank[r] : rank) + "]";
}

std::int64_t WorkerPlan::RankOffset(int rank) const {
  std::int64_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += RankSamples(r);
  return offset;
}

int WorkerPlan::Rounds() const {
  std::size_t rounds = 0;
  for (const auto& list : micro_batches) rounds = std::max(rounds, list.size());
  return static_cast<int>(rounds);
}

WorkerPlan ParseWorkerPlan(const std::string& text, const std::string& file) {
  // Plan files carry informational keys (predicted, stages, ...); only these are read.
  const nlohmann::json document = ParseJsonObject(text, file);
  JsonFields fields(document, file, "");
  WorkerPlan plan;
  plan.file = file;
  if (const auto format = fields.OptionalString("format"); format && *format != kPlanFormat) {
    fields.Fail("format", "must be \"" + std::string(kPlanFormat) + "\", got \"" + *format + "\"");
  }
  plan.stage = static_cast<int>(fields.IntegerIn("stage", 0, 3, "a ZeRO stage"));
  if (const auto predicted = document.find("predicted"); predicted != document.end() && predicted->is_object()) {
    const auto step_s = predicted->find("step_s");
    if (step_s != predicted->end() && step_s->is_number() && step_s->get<double>() > 0 &&
        std::isfinite(step_s->get<double>())) {
      plan.predicted_step_s = step_s->get<double>();
    }
  }
  if (const auto policy = document.find("policy"); policy != document.end() && policy->is_string()) {
    plan.policy = policy->get<std::string>();
  }
  plan.global_batch = fields.IntegerIn("global_batch", 1, kMostGlobalBatch, "a number of samples");

  if (fields.Has("model")) {
    JsonFields model = fields.Map("model");
    if (model.Has("params")) {
      plan.model_params = model.Integer("params");
      if (*plan.model_params <= 0) model.Fail("params", "must be a positive number of parameters");
    }
    plan.model_precision = model.OptionalString("precision");
    if (model.Has("config")) {
      JsonFields config = model.Map("config");
      plan.model_config = ReadModelConfig(config);
    }
  }

  const nlohmann::json& ranks = fields.List("ranks", 1, "a non-empty list of {rank, micro_batches}");
  plan.micro_batches.resize(ranks.size());
  plan.placement.resize(ranks.size());
  plan.entry_of_rank.resize(ranks.size());
  std::vector<bool> seen(ranks.size(), false);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string path = "ranks[" + std::to_string(i) + "]";
    JsonFields entry(ranks[i], file, path);
    const std::int64_t rank = entry.IntegerIn("rank", 0, static_cast<std::int64_t>(ranks.size()) - 1,
                                              "a rank of the plan's " + std::to_string(ranks.size()));
    if (seen[rank]) entry.Fail("rank", "rank " + std::to_string(rank) + " appears twice");
    seen[rank] = true;
    plan.entry_of_rank[rank] = static_cast<int>(i);
    plan.placement[rank] = {entry.OptionalString("node").value_or(""), entry.OptionalString("host").value_or(""),
                            entry.OptionalString("device_type").value_or("")};
    if (entry.Has("state_share")) {
      if (plan.stage == 0) entry.Fail("state_share", "stage 0 keeps every rank's state whole: it has no shares");
      plan.state_shares.resize(ranks.size(), -1);
      plan.state_shares[rank] = entry.NumberIn("state_share", 0, kMostStateShare,
                                               "a share of the model state from 0 to 1e9, relative to the other "
                                               "ranks' (0 holds none)");
    }
    const nlohmann::json& list = entry.List("micro_batches", 0, "a list of sizes");
    for (std::size_t m = 0; m < list.size(); ++m) {
      // At stages 2 and 3 a rank may sit out a round (0) but still joins its collectives.
      const std::int64_t least = plan.stage < 2 ? 1 : 0;
      const std::int64_t size = list[m].is_number_integer() ? list[m].get<std::int64_t>() : -1;
      if (size < least || size > kMostMicroBatch) {
        throw InputError(file, path + ".micro_batches[" + std::to_string(m) + "]",
                         "must be a number of samples from " + std::to_string(least) + " to " +
                             std::to_string(kMostMicroBatch) + " at stage " + std::to_string(plan.stage) + ", got " +
                             list[m].dump());
      }
      plan.micro_batches[rank].push_back(static_cast<int>(size));
    }
  }
  std::int64_t total = 0;
  for (int r = 0; r < plan.WorldSize(); ++r) total += plan.RankSamples(r);
  if (total != plan.global_batch) {
    throw InputError(file, "ranks",
                     "micro-batches sum to " + std::to_string(total) + " samples but global_batch is " +
                         std::to_string(plan.global_batch));
  }
  if (!plan.state_shares.empty()) {
    double sum = 0;
    for (int r = 0; r < plan.WorldSize(); ++r) {
      if (plan.state_shares[r] < 0) {
        throw InputError(file, plan.RankKey(r) + ".state_share",
                         "is missing: give every rank a state_share, or none (the even split)");
      }
      sum += plan.state_shares[r];
    }
    if (sum <= 0) throw InputError(file, "ranks", "the state_share values add up to 0: some rank must hold the state");
  }
  if (plan.stage >= 2) {
    for (int r = 0; r < plan.WorldSize(); ++r) {
      if (static_cast<int>(plan.micro_batches[r].size()) != plan.Rounds()) {
        throw InputError(file, "ranks",
                         "stage " + std::to_string(plan.stage) +
                             " needs the same number of micro-batches (rounds) on "
                             "every rank; rank " +
                             std::to_string(r) + " has " + std::to_string(plan.micro_batches[r].size()) + ", another " +
                             std::to_string(plan.Rounds()));
      }
    }
  }
  return plan;
}

WorkerPlan LoadWorkerPlan(const std::string& path) { return ParseWorkerPlan(ReadTextFile(path), path); }

void RequireWorldSize(const WorkerPlan& plan, int world_size) {
  if (plan.WorldSize() != world_size) {
    throw InputError(
        plan.file, "ranks",
        "the plan has " + std::to_string(plan.WorldSize()) + " ranks but WORLD_SIZE is " + std::to_string(world_size));
  }
}

void RequireSwitchable(const WorkerPlan& running, const WorkerPlan& next, std::int64_t batch_min,
                       std::int64_t batch_max) {
  RequireWorldSize(next, running.WorldSize());
  const std::string fixed = ", which a running job keeps from its start; stop it and launch --resume with this plan";
  if (batch_min > 0) {
    if (next.global_batch < batch_min || next.global_batch > batch_max) {
      throw InputError(next.file, "global_batch",
                       "is " + std::to_string(next.global_batch) + ", outside the adaptive batch's " +
                           std::to_string(batch_min) + " to " + std::to_string(batch_max));
    }
  } else if (next.global_batch != running.global_batch) {
    throw InputError(next.file, "global_batch",
                     "is " + std::to_string(next.global_batch) + " but the running job's is " +
                         std::to_string(running.global_batch) + fixed);
  }
  if (next.stage != running.stage) {
    throw InputError(next.file, "stage",
                     "is " + std::to_string(next.stage) + " but the running job trains at ZeRO stage " +
                         std::to_string(running.stage) + fixed);
  }
  if (next.state_shares != running.state_shares) {
    throw InputError(next.file, "ranks",
                     "the state_share values differ from the running job's (" +
                         (running.state_shares.empty() ? std::string("the even split") : "its own") + ")" + fixed);
  }
  const std::size_t placed = std::min(running.placement.size(), next.placement.size());
  for (std::size_t rank = 0; rank < placed; ++rank) {
    const auto differs = [](const std::string& a, const std::string& b) { return !a.empty() && !b.empty() && a != b; };
    const RankPlacement& was = running.placement.at(rank);
    const RankPlacement& now = next.placement.at(rank);
    if (differs(was.node, now.node) || differs(was.device_type, now.device_type)) {
      throw InputError(next.file, next.RankKey(static_cast<int>(rank)),
                       "runs on " + now.node + " (" + now.device_type + ") but the running job's rank " +
                           std::to_string(rank) + " runs on " + was.node + " (" + was.device_type +
                           "): a switch keeps every rank where it is");
    }
  }
}

std::string HandPlanSwitch(const std::string& folder, int number, const WorkerPlan& running,
                           const std::string& plan_text, const std::string& reason, const std::string& file,
                           std::int64_t batch_min, std::int64_t batch_max) {
  RequireSwitchable(running, ParseWorkerPlan(plan_text, file), batch_min, batch_max);
  WriteFileAtomically(folder + "/plan-" + std::to_string(number) + ".json", plan_text);
  nlohmann::ordered_json announced = {{"number", number}, {"reason", reason}};
  announced["plan"] = nlohmann::ordered_json::parse(plan_text);
  return announced.dump();
}

}  // namespace poplar
