// The part of a plan file a worker trains with (docs/formats.md): the stage, the global
// batch and every rank's micro-batches. Read and validated here, without torch, so the
// launcher and the tests share one definition of "a valid plan".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/formats/model_config.h"

namespace poplar {

// The largest global batch a cluster file or a plan may ask for, far above any real
// step (GPT-3 took 1.6 thousand samples): a plan lists every micro-batch of the step,
// so its size and the planner's time grow with the batch.
inline constexpr std::int64_t kMostGlobalBatch = 1'000'000;
// A micro-batch is part of one step's batch.
inline constexpr std::int64_t kMostMicroBatch = kMostGlobalBatch;

// The largest `state_share` a rank may hold: shares are relative (fractions, or counts
// of any unit); the bound keeps their sum finite and a bucket's cut points
// (size * running sum / sum, launcher/zero/flat_layout.h) well within a double.
inline constexpr double kMostStateShare = 1e9;

// The plan file's `format`. Optional when reading (a hand-written plan may leave it out);
// any other value is refused.
inline constexpr char kPlanFormat[] = "poplar-plan/1";

// Where a rank runs, as `poplar plan` writes it beside the micro-batches (empty when the
// plan file does not say; the worker itself needs none of it).
struct RankPlacement {
  std::string node;
  std::string host;
  std::string device_type;
};

struct WorkerPlan {
  std::string file;
  int stage = 0;
  std::int64_t global_batch = 0;
  std::vector<std::vector<int>> micro_batches;  // [rank] -> sizes in order
  std::vector<RankPlacement> placement;         // [rank]
  // [rank] -> its share of the sharded model state (`ranks[].state_share`, stages 1-3):
  // rank r holds state_shares[r] / sum of them of every bucket (launcher/zero/
  // flat_layout.h). Empty: ZeRO's even split.
  std::vector<double> state_shares;
  // [rank] -> its entry's index in the file's `ranks` list, which need not be in rank
  // order; empty for a plan not read from a file.
  std::vector<int> entry_of_rank;
  // The model `poplar plan` planned for (`model.params`, `model.precision`); absent
  // from a hand-written plan. The worker ignores them; the head checks them against
  // the job (RequirePlanForCluster), since micro-batches sized for another model's
  // memory may not fit.
  std::optional<std::int64_t> model_params;
  std::optional<std::string> model_precision;
  std::optional<ModelConfig> model_config;  // `model.config`: the model itself, when the profiles knew it
  // What `poplar plan` says of its plan, for the head's reports: `predicted.step_s` and
  // `policy`, read only where they have the types it writes (a positive number, a
  // string), absent otherwise: a hand-written plan with other types is not an error.
  std::optional<double> predicted_step_s;
  std::optional<std::string> policy;

  int WorldSize() const { return static_cast<int>(micro_batches.size()); }
  std::int64_t RankSamples(int rank) const;
  // Index within the global batch of rank `rank`'s first sample: samples are divided
  // among ranks in rank order.
  std::int64_t RankOffset(int rank) const;
  int Rounds() const;  // stages 2-3: entries per rank
  // The key of rank `rank`'s entry in the file, for errors: "ranks[3]".
  std::string RankKey(int rank) const;
};

// Parses and validates: format, if given, is kPlanFormat; stage 0..3; global_batch > 0; ranks numbered 0..N-1, each
// once; micro-batches non-negative integers, 0 only at stages 2-3; their sum is global_batch; at stages 2-3 every rank
// has the same number of entries; `state_share`, if any rank has one, on every rank, at stages 1-3, a number from 0 to
// kMostStateShare with a positive sum; `model`, if given, an object whose `params`, if given, is a positive integer,
// `precision` a string and `config` a model configuration (model_config.h). Throws InputError naming the file and the
// key.
WorkerPlan ParseWorkerPlan(const std::string& text, const std::string& file);
WorkerPlan LoadWorkerPlan(const std::string& path);

// Throws InputError unless the plan has exactly `world_size` ranks.
void RequireWorldSize(const WorkerPlan& plan, int world_size);

// Throws InputError naming `next`'s file and key unless `next` can replace `running` in a
// running job between two steps (docs/worker.md, "Plan switches"): the same ranks, each
// on the same node and device type where both plans say, the same global batch, ZeRO
// stage and state shares (the same values, or none in both). Only the micro-batches
// change: the stage and the state split are the run's, fixed from its start. With
// `batch_min` > 0 (an adaptive batch), the global batch may change within [batch_min,
// batch_max].
void RequireSwitchable(const WorkerPlan& running, const WorkerPlan& next, std::int64_t batch_min = 0,
                       std::int64_t batch_max = 0);

// Hands `plan_text` to a running job's rank 0 as plan `number`: once it can replace
// `running` (RequireSwitchable, its errors naming `file`), writes it whole as
// `folder`/plan-<number>.json, the folder rank 0's worker reads (--plan-switches), and
// returns the announcement the head reports: {"number", "reason", "plan"} as JSON text.
// Throws InputError, having written nothing, for a plan that cannot replace `running`.
std::string HandPlanSwitch(const std::string& folder, int number, const WorkerPlan& running,
                           const std::string& plan_text, const std::string& reason, const std::string& file,
                           std::int64_t batch_min = 0, std::int64_t batch_max = 0);

}  // namespace poplar
