// The parts of one `poplar launch` that its two paths share: through the agents
// (launch_command.cc) and under Slurm (slurm_launch.h): the options, the plan prepared,
// where the job meets, the proposers of new plans, and the summary at the end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "launcher/head/batch_chooser.h"
#include "launcher/head/interruption.h"
#include "launcher/head/launch_monitor.h"
#include "launcher/head/rebalancer.h"
#include "launcher/head/run_directory.h"
#include "planner/base/text_file.h"
#include "planner/cluster/cluster.h"
#include "planner/cluster/precision_choice.h"
#include "planner/formats/profile.h"
#include "planner/formats/worker_plan.h"

namespace poplar {

// `poplar launch`'s flags (RegisterLaunchCommand).
struct LaunchOptions {
  std::string cluster_file;
  std::string plan_file;
  std::string network_file;  // when planning: a measured network instead of the cluster file's
  std::string policy = "poplar";
  std::string run_dir;
  std::string job_id;
  std::int64_t steps = 0;
  int master_port = 0;  // 0: a port rank 0's agent finds free
  int timeout_s = 0;
  int progress_every = 10;
  std::int64_t trace_step = 0;  // 0: no step traced
  bool resume = false;
  bool json = false;      // the summary alone on stdout, every other line on stderr
  bool timeline = false;  // run_dir/timeline.json, a Chrome trace of every rank's steps
  bool elastic = false;   // restart from the newest checkpoint after a failure
  int max_restarts = 3;
  std::string rebalance = "on";  // on: where the plan's profiles are known (rebalancer.h)
  RebalanceOptions rebalancing;
  bool slurm = false;  // inside a Slurm allocation: its nodes, one srun of the ranks, no agents
  std::string worker;  // --slurm: poplar-worker on every node (default: the one beside poplar)
};

// The plan a launch follows, with the profiles it was made from or checked against.
struct PreparedPlan {
  std::string text;             // the plan file, as written to the run directory and sent to the agents
  WorkerPlan plan;              // the same, parsed; its predicted step from the profiles when it says none
  std::string checked_against;  // --plan: the profiles folder it was checked against, if any
  std::map<std::string, DeviceProfile> profiles;  // and its profiles, by device type
  WorkerPrecisionChoice precision;                // what the workers train in, and why
};

// The plan the planner makes from `profiles` (one per device type of `cluster`), with
// the precision the workers train in; its report and precision said on stdout.
PreparedPlan PlanFromProfiles(const LaunchOptions& options, const ClusterSpec& cluster,
                              std::map<std::string, DeviceProfile> profiles);

// A signal received before any worker was started ends the launch at the next step,
// which leaves the run directory as it found it (RunDirectory) and starts nothing.
void StopIfInterrupted(const Interruption& interruption, const std::string& job_id);

// Where a job runs and meets: its id, its plan and model, rank 0's address.
struct JobPlace {
  std::string job_id;
  std::string plan_text;
  std::string precision;  // the workers' --precision
  std::string model;
  std::string master_addr;
  int master_port = 0;
};

// The Launch request of one node: the job's settings, the same on every node.
// Whether an attempt goes on from a checkpoint: `resume` when one is there, and with
// `require_checkpoint` never from step 0 (the ranks refuse).
struct Resumption {
  bool resume = false;
  bool require_checkpoint = false;
};

// run_dir/summary.json: the plan's policy and stage, what the monitor measured, and the
// failure, if any.
// The summary, with the straggler of each plan trained (timeline.h); with --timeline,
// run_dir/timeline.json too. Both from the run directory's metrics, every attempt's.
nlohmann::ordered_json WriteSummary(const LaunchOptions& options, const std::string& run_dir, const std::string& job_id,
                                    const PreparedPlan& prepared, const LaunchMonitor& monitor);

// The last lines of a run that trained: the loss, the measured and predicted step, the
// straggler; or that no step was left to train.
void SayWhatWasTrained(const nlohmann::ordered_json& summary, const JobSpec& job, const std::string& run_dir);

// --json: while it lives, what the launch writes to stdout goes to stderr; Print writes
// the one document to the real stdout.
class SummaryOnStdout {
 public:
  SummaryOnStdout() : stdout_(std::cout.rdbuf(std::cerr.rdbuf())) {}
  ~SummaryOnStdout() { std::cout.rdbuf(stdout_); }
  SummaryOnStdout(const SummaryOnStdout&) = delete;
  SummaryOnStdout& operator=(const SummaryOnStdout&) = delete;
  void Print(const nlohmann::ordered_json& summary) {
    std::ostream out(stdout_);
    out << summary.dump(2) << "\n" << std::flush;
  }

 private:
  std::streambuf* stdout_;
};

// The index in `cluster` of the node named `name` (one the plan was checked to have).
std::size_t NodeIndex(const ClusterSpec& cluster, const std::string& name);

// The run's rebalancer (--rebalance on, where the plan's profiles are known), said in
// one line; none otherwise.
std::optional<Rebalancer> RebalancerFor(const LaunchOptions& options, const ClusterSpec& cluster,
                                        const PreparedPlan& prepared, std::int64_t steps);

// The run's batch chooser (job.batch: adaptive), said in one line; none otherwise. Throws
// InputError naming the cluster file's job.batch when the plan's profiles are unknown (no
// throughput to predict), or job.batch_min / job.batch_max when the plan's stage has no
// schedule for that batch on these devices.
std::optional<BatchChooser> BatchChooserFor(const ClusterSpec& cluster, const JobSpec& job,
                                            const PreparedPlan& prepared);

// The rebalancer and the batch chooser of one attempt, given every metrics record: they
// propose in turn, each following the other's plans and proposing nothing while one
// waits to train; `hand` gives rank 0 a plan and returns its number, or none when it was
// not handed (said why).
class PlanProposers {
 public:
  using Hand = std::function<std::optional<int>(const std::string& plan_text, const std::string& reason,
                                                const std::string& proposer)>;
  PlanProposers(std::optional<Rebalancer> rebalancer, std::optional<BatchChooser> chooser, const PreparedPlan& prepared,
                const std::string& run_dir, Hand hand)
      : rebalancer_(std::move(rebalancer)),
        chooser_(std::move(chooser)),
        prepared_(prepared),
        choices_file_((std::filesystem::path(run_dir) / "batch_choices.jsonl").string()),
        rebalance_file_((std::filesystem::path(run_dir) / "rebalance_judgements.jsonl").string()),
        hand_(std::move(hand)) {
    if (rebalancer_) {
      rebalancer_->RecordJudgements(
          [this](const nlohmann::ordered_json& judgement) { AppendLine(rebalance_out_, rebalance_file_, judgement); });
    }
    if (chooser_) {
      chooser_->RecordJudgements([this](const nlohmann::ordered_json& judgement) {
        AppendLine(choices_out_, choices_file_, judgement);
        // A batch kept is said here; a batch chosen, once handed.
        if (judgement["chosen"] == judgement["batch"])
          std::cout << "adaptive batch: " << chooser_->last_line() << std::endl;
      });
    }
  }
  // The proposers' records write through this object.
  PlanProposers(const PlanProposers&) = delete;
  PlanProposers& operator=(const PlanProposers&) = delete;

  void Metrics(int rank, const nlohmann::json& record) {
    if (rebalancer_) {
      if (const std::optional<Rebalance> proposal = rebalancer_->Metrics(rank, record)) {
        const auto number = hand_(proposal->plan_text, "rebalanced: " + proposal->reason, "rebalancing");
        if (!number) return rebalancer_->NotHanded();
        rebalancer_->Handed(*number);
        if (chooser_) chooser_->Following(proposal->plan, *number);
        return;
      }
    }
    if (!chooser_) return;
    const std::optional<BatchChoice> choice = chooser_->Metrics(
        rank, record, [&] { return rebalancer_ ? rebalancer_->CorrectedProfiles() : prepared_.profiles; });
    if (!choice) return;
    const auto number = hand_(choice->plan_text, choice->reason, "adaptive batch");
    if (!number) return chooser_->NotHanded();
    chooser_->Handed(*number);
    if (rebalancer_) rebalancer_->Following(choice->plan, *number);
  }

 private:
  // A judgement as one line of `file`, appended (every attempt's stay, and a long run's
  // record costs what it holds).
  static void AppendLine(std::ofstream& out, const std::string& file, const nlohmann::ordered_json& judgement) {
    if (!out.is_open()) out.open(file, std::ios::app);
    out << judgement.dump() << std::endl;
  }

  std::optional<Rebalancer> rebalancer_;
  std::optional<BatchChooser> chooser_;
  const PreparedPlan& prepared_;
  std::string choices_file_;
  std::ofstream choices_out_;
  std::string rebalance_file_;
  std::ofstream rebalance_out_;
  Hand hand_;
};

// What a launch has before it starts anything, through agents or under Slurm.
struct LaunchStart {
  const LaunchOptions& options;
  const Interruption& interruption;
  std::optional<SummaryOnStdout>& json;
  const ClusterSpec& cluster;
  JobPlace& place;
  const JobSpec& job;
  const std::string& run_dir;
  RunDirectory& directory;
  std::optional<PreparedPlan>& given;
};

}  // namespace poplar
