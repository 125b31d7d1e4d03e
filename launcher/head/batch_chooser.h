// BatchChooser: the adaptive global batch of a running job (job.batch: adaptive;
// docs/operations.md, "Adaptive batch"). No gRPC here: `poplar launch` feeds it rank 0's
// metrics records and hands its proposals to rank 0's agent (SwitchPlan), as the
// rebalancer's.
//
// The objective is goodput (Pollux, OSDI 2021): samples per second times the statistical
// efficiency of the batch. With the gradient noise scale B_noise that the ranks estimate
// (the records' `noise_scale`: McCandlish et al. 2018, launcher/worker/noise_scale.h),
// a step of B samples makes the progress of (B_noise + B_now) / (B_noise + B) times B
// samples at the batch B_now that trains now, so a batch is worth
//
//   goodput(B) = B / step_s(B) * (B_noise + B_now) / (B_noise + B),
//
// step_s(B) being the planner's prediction for its best schedule at the running stage
// and state shares (ReplanRunningJob) on the devices as they are known now (the
// rebalancer's corrected profiles). Small noise (early training) favours small batches,
// which make more steps of nearly the same value; as the noise scale grows, larger
// batches pay, up to where the cluster's throughput stops growing.
//
// Every `every` steps that rank 0 reports, the chooser judges the candidates
// (CandidateBatches: those whose best plan keeps the noise scale measured, MeasuresNoise,
// so that the batch never goes where it can no longer be judged) and proposes the best when its goodput beats the
// running batch's by more than `min_gain` and at least `every` steps are left to gain it. A judgement needs a positive
// noise scale in the latest record; without one it keeps the batch. It measures nothing while a plan it proposed waits
// to train, nor on a plan it does not know (a switch by hand: the plan is the user's).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"
#include "planner/formats/worker_plan.h"

namespace poplar {

struct BatchChoiceOptions {
  std::int64_t batch_min = 1, batch_max = 1;  // the bounds (job.batch_min, job.batch_max)
  int every = 20;                             // steps between judgements (job.batch_every), >= 1
  double min_gain = 0.05;                     // a new batch's goodput must beat the running one's by this
  std::int64_t last_step = 0;                 // the run's last step (0: none)
};

// The batches judged when `current` trains: the bounds, `current`, and a geometric
// ladder from batch_min to batch_max (each about 2^(1/4) times the last), ascending and
// distinct.
std::vector<std::int64_t> CandidateBatches(std::int64_t batch_min, std::int64_t batch_max, std::int64_t current);

// Whether the ranks measure the noise scale under `plan`: some rank's local gradient is
// of a smaller batch than the whole (noise_scale.h). At stages 0-1 a rank's local
// gradient is of its samples of the step, so two ranks must have samples; at stages 2-3
// it is of one round's micro-batch, which must hold fewer samples than the batch.
bool MeasuresNoise(const WorkerPlan& plan);

// The progress of a step of `batch` samples in units of a step of `current`'s, per
// sample: (noise_scale + current) / (noise_scale + batch).
double StatisticalEfficiency(double noise_scale, std::int64_t batch, std::int64_t current);

// One candidate as judged.
struct BatchCandidate {
  std::int64_t batch = 0;
  double step_s = 0;      // predicted, its best schedule
  double efficiency = 0;  // StatisticalEfficiency against the running batch
  double goodput = 0;     // batch / step_s * efficiency
};

struct BatchChoice {
  std::string plan_text;  // the plan file to hand the job
  WorkerPlan plan;        // the same, parsed
  std::string reason;     // in words, for the progress and the run directory
  std::int64_t global_batch = 0;
  double predicted_step_s = 0;
};

class BatchChooser {
 public:
  // `plan`: the job's starting plan, made for `cluster`.
  BatchChooser(ClusterSpec cluster, const WorkerPlan& plan, BatchChoiceOptions options);

  // The devices' profiles as known now (the rebalancer's corrected ones), asked for only
  // when a judgement is due.
  using Profiles = std::function<std::map<std::string, DeviceProfile>()>;

  // A rank's metrics record (only rank 0's count). Returns a plan to hand the job when
  // one is due.
  std::optional<BatchChoice> Metrics(int rank, const nlohmann::json& record, const Profiles& profiles);

  // As the rebalancer's (rebalancer.h): the proposal was handed as plan `number`, or
  // not; another proposer's plan was handed as `number` (the same batch, other
  // micro-batches).
  void Handed(int number);
  void NotHanded();
  void Following(const WorkerPlan& plan, int number);

  // The latest judgement, for the progress, in one line; empty before the first.
  const std::string& last_line() const { return last_line_; }
  // Each judgement, handed to `record` as it is made (for the run directory's
  // batch_choices.jsonl) and not kept.
  using Record = std::function<void(const nlohmann::ordered_json&)>;
  void RecordJudgements(Record record) { record_ = std::move(record); }

 private:
  std::optional<BatchChoice> Judge(std::int64_t step, double noise_scale,
                                   const std::map<std::string, DeviceProfile>& profiles);

  const ClusterSpec cluster_;
  const BatchChoiceOptions options_;
  WorkerPlan plan_;  // in force
  int number_ = 0;   // its number in the records
  std::optional<WorkerPlan> proposed_;
  std::optional<int> awaited_;
  int since_judged_ = 0;  // rank 0's records since the last judgement (or the batch's start)
  std::string last_line_;
  Record record_;
};

}  // namespace poplar
