// Rebalancer: notices a device type that computes persistently slower (or faster) than
// its profile during a run, and proposes the plan that fits the devices as they are now
// (docs/operations.md, "Rebalancing"). No gRPC here: `poplar launch` feeds it the ranks'
// metrics records and hands its proposals to rank 0's agent (SwitchPlan).
//
// Each rank's record says which plan trained its step and how long its micro-batches
// computed (compute_s); the profiles predict that time for the same micro-batches
// (PredictRankCompute). A rank's ratio is the median of measured / predicted over the
// last `window` steps of a plan (its first step, a warm-up, left out); a device type's
// is its slowest rank's, since the step waits for it. Once every rank with samples has a
// full window, a type whose ratio departs from its correction (1 at the start) by more
// than `threshold` of it in two consecutive windows, the same way (both slower or both
// faster), gets their mean as its new correction (the others keep theirs: a dead band
// around what is known, and a reading confirmed, so that noise and a warm-up move
// nothing, while a speed that keeps drifting is followed); while any
// type's reading awaits its confirmation nothing is proposed (a plan on half the new
// picture could give a type more work just as it slows down). The profiles' compute and
// optimizer times are multiplied by the corrections, and the running job is re-planned at its stage and state shares
// (ReplanRunningJob). The new plan is proposed when, on the corrected profiles, it predicts a step shorter than the
// running plan's by more than `min_gain` of it, and the steps left gain more than the
// switch costs (the most a record's switch_s showed; 50 ms before any did). The windows
// then start over; after a proposal, nothing is measured until the records name the new
// plan. A type given no samples keeps the correction it last measured. Records of a plan
// it did not propose (a switch by hand) are not measured: the plan is the user's; a plan
// another proposer handed (Following) is measured as its own. Its plans keep the running
// plan's global batch.
//
// Hysteresis: corrections are against the profiles, not the running plan, and move only
// past the dead band, so a device still as slow after the switch yields the same
// corrected plan, no gain, and no second switch. A judgement takes `window` fresh steps
// of every rank, and a change two judgements: it is acted on within two to three windows.
#pragma once

#include <cstdint>
#include <deque>
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

struct RebalanceOptions {
  int window = 8;              // steps of a plan per rank before it is judged, >= 2
  double threshold = 0.2;      // a type's compute off its profile by more than this is corrected
  double min_gain = 0.05;      // a new plan must predict a step shorter by this fraction
  std::int64_t last_step = 0;  // the run's last step: a switch must gain more than it costs before then
};

struct Rebalance {
  std::string plan_text;  // the plan file to hand the job
  WorkerPlan plan;        // the same, parsed
  std::string reason;     // in words, for the progress and the run directory
  double predicted_step_s = 0;
};

class Rebalancer {
 public:
  // `plan`: the job's starting plan, made for `cluster` and `profiles`.
  Rebalancer(ClusterSpec cluster, std::map<std::string, DeviceProfile> profiles, const WorkerPlan& plan,
             RebalanceOptions options);

  // A rank's metrics record. Returns a plan to hand the job when one is due.
  std::optional<Rebalance> Metrics(int rank, const nlohmann::json& record);

  // The plan proposed last was handed to the job as plan `number` (its records then say
  // "plan": number); until then the ranks' records are not measured.
  void Handed(int number);
  // The plan proposed last was not handed (the agent refused it): measuring goes on.
  void NotHanded();

  // Another proposer's plan (the adaptive batch's) was handed to the job as plan
  // `number`: it is followed and measured as the rebalancer's own once it trains.
  void Following(const WorkerPlan& plan, int number);

  // The profiles with each type's correction applied: the devices as measured now.
  std::map<std::string, DeviceProfile> CorrectedProfiles() const;

  // Device type -> its correction now (1: as profiled).
  const std::map<std::string, double>& corrections() const { return corrections_; }

  // Each judgement, handed to `record` as it is made (for the run directory's
  // rebalance_judgements.jsonl) and not kept: the step, each type's reading, the
  // corrections and the readings awaiting confirmation after it, and what came of it
  // ("outcome", in words).
  using Record = std::function<void(const nlohmann::ordered_json&)>;
  void RecordJudgements(Record record) { record_ = std::move(record); }
  // The latest judgement; null before the first.
  const nlohmann::ordered_json& last_judgement() const { return last_judgement_; }

 private:
  void Follow(const WorkerPlan& plan, int number);
  std::optional<Rebalance> Judge();

  const ClusterSpec cluster_;
  const std::map<std::string, DeviceProfile> profiles_;
  const RebalanceOptions options_;
  std::vector<std::string> rank_types_;     // [rank] -> device type
  WorkerPlan plan_;                         // in force
  int number_ = 0;                          // its number in the records
  std::vector<double> predicted_;           // [rank] -> compute_s its profile predicts for plan_
  std::vector<std::deque<double>> ratios_;  // [rank] -> measured / predicted, the window's
  std::vector<bool> warmed_up_;             // [rank] -> it reported plan_'s first step (a warm-up)
  std::map<std::string, double> corrections_;
  std::map<std::string, double> candidates_;  // type -> a new ratio seen in one window, awaiting the next
  std::optional<WorkerPlan> proposed_;        // proposed, not yet handed
  std::optional<int> awaited_;                // handed as this number, not yet training
  std::int64_t step_ = 0;                     // the latest step reported
  double switch_cost_s_ = 0.05;
  nlohmann::ordered_json last_judgement_;
  Record record_;
};

}  // namespace poplar
