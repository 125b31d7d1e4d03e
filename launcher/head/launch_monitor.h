// LaunchMonitor: what `poplar launch` makes of the events its agents stream back.
// It writes the run directory's per-rank logs and metrics, prints a progress line every
// few steps (step, loss, samples per second, busy share per device type: compute time
// over step time), chooses the reason to report when the job fails, and summarises the
// run. No gRPC here: events arrive as plain values, so the logic is testable alone.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

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

  // A resume of job `job_id` (launch --resume): rank 0's first step then tells at once,
  // not after the run, whether it went on from a checkpoint or started over.
  void ExpectResume(std::string job_id) { resume_job_ = std::move(job_id); }
  // A job with a learning-rate schedule: `rate` gives each step's. Each rank's first
  // record must report that rate, or the job fails naming the node: a node whose agent
  // predates the schedule leaves its flags out (proto3 drops the fields it does not
  // know) and would train at the constant rate, silently; one whose worker predates it
  // reports no rate.
  void ExpectLearningRates(std::function<double(std::int64_t step)> rate) { expected_rate_ = std::move(rate); }
  // A job with a held-out evaluation every `every` steps (0: after the last only): rank
  // 0's first record must say it evaluates (eval_every), or the job fails at once naming
  // the node: its agent, older than job.eval_data, left the evaluation out (proto3 drops
  // the fields it does not know), and the run would otherwise only fail at the first
  // step due for a held-out loss, perhaps its last. A worker older than it refuses
  // --eval-data at its start, and ranks that disagree on the evaluation stop at theirs
  // (job settings).
  void ExpectEvaluation(std::int64_t every) { eval_every_ = every; }

  // A line a rank wrote: into its log; a worker's warning ("poplar-worker[rank 0]:
  // warning: ...": a resume that changes the training, a checkpoint it could not prune)
  // also to `out`, after the node's name, since the user reads no log of a run that went well.
  void Output(int rank, const std::string& line);
  // A rank's metrics record. Rank 0's first one is always followed by a progress line,
  // after "resumed from the checkpoint of step N" when it is not step 1; so is one with a
  // held-out loss (val_loss), which the line shows.
  void Metrics(int rank, const std::string& json_line);
  // A node's job failed with this reason (the agent's text), with the rank's exit status
  // when a rank exited (an EXITED event), none for the node's final reason (JOB_FAILED).
  // The reason reported is the likeliest root cause: a rank killed by a signal or
  // failing on its own outranks ranks that failed because a peer went away (exit status
  // kPeerFailureExitStatus, command_failed.h), which outrank stops. Without a status,
  // the reason is ranked as the same reason of the node's rank exit, else by its words.
  void Failure(const std::string& node, const std::string& reason, std::optional<int> exit_status = std::nullopt);
  // The head stopped the job or lost a node's stream (Ctrl-C, a broken or cancelled
  // stream): a failure that outranks no job failure, whatever its text.
  void Stopped(const std::string& node, const std::string& reason);
  // A node's agent went away while the job ran and the head was not stopping it: a
  // cause (ranked with a rank failing on its own), which the peers' lost connections
  // and the other nodes' "failed elsewhere" stops never outrank.
  void AgentLost(const std::string& node, const std::string& reason);
  // The user stopped the job from the head (`how`: "Ctrl-C", ...): a stop, as above,
  // which UserStop names when nothing outranks it.
  void UserStopped(const std::string& how);

  // The job's first failure came just after the head itself did not run for `seconds`
  // (suspended with Ctrl-Z or SIGSTOP, its machine paused, its output blocked). When
  // that failure is a lost connection (a node's stream broke, its agent was lost), the
  // stall is the root cause, whatever the nodes say (they
  // saw a silent head; the head's keepalive, a silent node). A failure of another kind
  // (a rank out of memory while the head's output was blocked) stays the cause, and the
  // stall is mentioned after it. The caller decides that the two are close in time.
  void HeadStalled(double seconds);

  bool failed() const { return !failures_.empty(); }
  // "node 'b': rank 1 was killed by signal 9 (Killed)", or the head's stall.
  std::string RootCause() const;
  // "stopped by the user (Ctrl-C)" when the user's stop is the root cause (no failure of
  // the job's came before it); empty otherwise.
  std::string UserStop() const;

  // Of a failed job, in words: whether checkpoints were due by rank 0's last step
  // reported (every `checkpoint_every` steps), or the launch resumed: "the checkpoints
  // rank 0's node completed (every 5 steps) stay in <where>", else "no checkpoint was
  // due by step 3, ...". The head cannot know which checkpoints rank 0's background
  // writer completed, so it claims none.
  std::string CheckpointsKept(std::int64_t checkpoint_every, const std::string& where) const;

  // The summary of a finished run: steps, first and last loss, the median step time
  // over the steps after the first fifth (warm-up), samples per second, busy shares;
  // the latest held-out loss and its step (val_loss, val_step) when there was one.
  nlohmann::ordered_json Summary(double predicted_step_s) const;

 private:
  struct Failed {
    int severity;
    std::string node;
    std::string reason;
    enum class Kind { kJob, kConnection, kUser };
    Kind kind = Kind::kJob;  // kConnection: a stream that broke or an agent lost
  };
  // The node rank `rank` runs on, or "?" for a rank the plan does not have.
  std::string NodeOf(int rank) const;
  // The failure RootCause names when the head did not stall: the most telling.
  const Failed& MostTelling() const;
  // run_dir/<folder>/rank-<rank><suffix>, opened for appending on first use.
  std::ofstream& RankFile(std::map<int, std::unique_ptr<std::ofstream>>& files, const char* folder, const char* suffix,
                          int rank);
  std::string ProgressLine(std::int64_t step) const;
  // Device type -> mean over its ranks of compute_s / step_s in their latest record.
  std::map<std::string, double> BusyShares() const;
  // Fails the job when `rank`'s first record does not take the expected rate.
  void CheckLearningRate(int rank, const nlohmann::json& record);
  // Fails the job when rank 0's first record does not say it evaluates, as asked.
  void CheckEvaluation(const nlohmann::json& record);

  std::string run_dir_;
  std::vector<RankInfo> ranks_;
  std::int64_t steps_;
  int progress_every_;
  std::ostream& out_;
  std::map<int, std::unique_ptr<std::ofstream>> logs_, metrics_files_;
  std::map<int, nlohmann::json> latest_;               // rank -> last metrics record
  std::vector<nlohmann::json> rank0_steps_;            // rank 0's records in order
  std::string resume_job_;                             // ExpectResume's job, or empty
  std::function<double(std::int64_t)> expected_rate_;  // ExpectLearningRates', or empty
  std::set<int> rates_checked_;                        // the ranks whose first record was checked
  std::optional<std::int64_t> eval_every_;             // ExpectEvaluation's, or none
  std::vector<Failed> failures_;
  double head_stalled_s_ = 0;  // the longest HeadStalled
};

}  // namespace poplar
