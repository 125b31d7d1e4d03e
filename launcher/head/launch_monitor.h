// LaunchMonitor: what `poplar launch` makes of the events its agents stream back. It
// keeps the run directory's per-rank logs and metrics (RankFiles), prints a progress
// line every few steps (step, loss, samples per second, busy share per device type:
// compute time over step time), keeps the job's failures for the reason to report
// (FailureCauses), and summarises the run. No gRPC here: events arrive as plain
// values, so the logic is testable alone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/head/failure_causes.h"
#include "launcher/head/rank_files.h"

namespace poplar {

struct RankInfo {
  std::string node;
  std::string device_type;
};

class LaunchMonitor {
 public:
  // `ranks` indexed by rank; progress lines go to `out` every `progress_every` steps.
  // An empty `run_dir` keeps no logs or metrics files.
  LaunchMonitor(std::string run_dir, std::vector<RankInfo> ranks, std::int64_t steps, int progress_every,
                std::ostream& out);

  // The prediction of the plan the job starts with, for the switches' reports.
  void StartingPlan(std::optional<double> predicted_step_s) { predicted_step_s_ = predicted_step_s; }

  // A plan handed to the job's rank 0 (the agent's PLAN_SWITCH event: JSON {"number",
  // "reason", "plan"}): kept as run_dir/plans/plan-N.json. It takes over at the first
  // step whose rank 0 record says "plan": N; that step is then reported ("step S: plan N
  // trains from here, predicted ... per step, was ...: why") and recorded in
  // run_dir/plan_switches.json and the summary's `plan_switches`.
  void PlanSwitch(const std::string& json_text);

  // A resume of job `job_id` (launch --resume): rank 0's first step then tells at once,
  // not after the run, whether it went on from a checkpoint or started over.
  void ExpectResume(std::string job_id) { resume_job_ = std::move(job_id); }

  // A line a rank wrote: into its log; a worker's warning ("poplar-worker[rank 0]:
  // warning: ...": a resume that changes the training, a checkpoint it could not prune)
  // also to `out`, after the node's name, since the user reads no log of a run that went well.
  void Output(int rank, const std::string& line);
  // A rank's metrics record. Rank 0's first one is always followed by a progress line,
  // after "resumed from the checkpoint of step N" when it is not step 1; so is one with a
  // held-out loss (val_loss), which the line shows.
  void Metrics(int rank, const std::string& json_line);
  // The job's failures, ranked for its root cause (FailureCauses, failure_causes.h).
  void Failure(const std::string& node, const std::string& reason, std::optional<int> exit_status = std::nullopt);
  void Stopped(const std::string& node, const std::string& reason) { causes_.Stopped(node, reason); }
  void AgentLost(const std::string& node, const std::string& reason) { causes_.AgentLost(node, reason); }
  void UserStopped(const std::string& how) { causes_.UserStopped(how); }
  // The head stops the job to take back a node (FailureCauses::TakingBack).
  void TakingBack(const std::string& reason) { causes_.TakingBack(reason); }
  void HeadStalled(double seconds) { causes_.HeadStalled(seconds); }
  bool failed() const { return causes_.failed(); }
  std::string RootCause() const { return causes_.RootCause(); }
  std::string UserStop() const { return causes_.UserStop(); }
  std::string TakeBack() const { return causes_.TakeBack(); }

  // Of a failed job, in words: whether checkpoints were due by rank 0's last step
  // reported (every `checkpoint_every` steps), or the launch resumed: "the checkpoints
  // rank 0's node completed (every 5 steps) stay in <where>", else "no checkpoint was
  // due by step 3, ...". The head cannot know which checkpoints rank 0's background
  // writer completed, so it claims none.
  std::string CheckpointsKept(std::int64_t checkpoint_every, const std::string& where) const;
  // Whether a checkpoint was due by rank 0's last step reported (every
  // `checkpoint_every` steps, and at the run's last), or the run resumed from one: a
  // restart must then go on from a checkpoint, never from step 0.
  bool CheckpointDue(std::int64_t checkpoint_every) const;
  // The global batch of rank 0's last step reported; none before its first.
  std::optional<std::int64_t> LastGlobalBatch() const;
  // The plan rank 0's last step reported trained, when a switch had taken over: its
  // number and its plan file's text, as handed. None while the starting plan trains.
  std::optional<std::pair<int, std::string>> PlanTrained() const;

  // The summary of a finished run: steps, first and last loss, the median step time
  // over the steps after the first fifth (warm-up) of those the last plan trained, with
  // that plan's prediction, samples per second, busy shares; the latest held-out loss
  // and its step (val_loss, val_step) when there was one; the plan switches.
  nlohmann::ordered_json Summary() const;

 private:
  // The node rank `rank` runs on, or "?" for a rank the plan does not have.
  std::string NodeOf(int rank) const;
  std::string ProgressLine(std::int64_t step) const;
  // Rank 0's record of step `step` says which plan trained it: a new one took over.
  void FollowPlan(const nlohmann::json& record, std::int64_t step);
  // Device type -> mean over its ranks of compute_s / step_s in their latest record.
  std::map<std::string, double> BusyShares() const;

  RankFiles files_;
  std::vector<RankInfo> ranks_;
  std::int64_t steps_;
  int progress_every_;
  std::ostream& out_;
  std::map<int, nlohmann::json> latest_;     // rank -> last metrics record
  std::vector<nlohmann::json> rank0_steps_;  // rank 0's records in order
  std::string resume_job_;                   // ExpectResume's job, or empty
  std::string run_dir_;
  std::optional<double> predicted_step_s_;                             // of the plan in force
  int plan_ = 0;                                                       // the plan in force (0: the starting one)
  std::size_t plan_since_ = 0;                                         // its first record in rank0_steps_
  std::map<int, nlohmann::json> plans_handed_;                         // number -> {"reason", "plan"}
  nlohmann::ordered_json switches_ = nlohmann::ordered_json::array();  // those that took over
  FailureCauses causes_;
};

}  // namespace poplar
