// The job's timeline (`poplar launch --timeline`) and its straggler report, made from
// the ranks' metrics records (docs/worker.md, "Metrics"). No gRPC here.
//
// Every record places its step on the job's clock (`start_s`: seconds since every rank
// left the rendezvous's last barrier, the same instant on every rank to a collective's
// latency, whatever the machines' clocks say) and says where its time went (`spans`:
// each micro-batch's start, wall time, compute and samples; the optimizer step's and the
// loss all-reduce's start and wall time, all from the step's start). The timeline is one
// Chrome trace (JSON object format: Perfetto and chrome://tracing open it) with a track
// per rank, named for its device type and node: each step as a slice, and inside it the
// micro-batches (their compute, and what they waited in collectives), the optimizer and
// the loss all-reduce; what is left of the step is waiting for the others. A resumed
// attempt's clock starts again: its steps follow the attempt before on the time axis.
//
// A rank's idle time in a step is what its micro-batches and optimizer did not compute:
// step_s - compute_s - optimizer_s. The straggler of a stretch of the run (a plan) is
// the rank idle least (the others wait for it); the report gives each its median idle
// share, so that a user sees which device holds the step. Where the plans say what
// each device type should compute per step (their `device_types[].busy_s`), the report
// sets the measured compute beside it, so that a user sees whether to re-profile.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace poplar {

// One rank's records, in the order it wrote them.
struct RankRecords {
  int rank = 0;
  std::string device_type;
  std::string node;
  std::vector<nlohmann::json> records;
};

// The Chrome trace of `ranks` for job `job_id`. Records without `start_s` or `spans`
// (a worker of another version, a line that is not an object) are left out.
nlohmann::json TimelineTrace(const std::string& job_id, const std::vector<RankRecords>& ranks);

// What each plan predicts a device type computes per step: plan number -> device type
// -> seconds (a plan file's `device_types[].busy_s`).
using PredictedBusy = std::map<int, std::map<std::string, double>>;

// The predictions of run_dir/plan.json (plan 0) and run_dir/plans/plan-N.json (plan N),
// where they say; a plan unreadable or without `device_types` adds nothing.
PredictedBusy ReadPredictedBusy(const std::string& run_dir);

// Per plan trained (the records' `plan`, in the order they first trained): its steps,
// each rank's median idle share (idle / step_s, after the plan's first step) and its
// straggler, the rank idle least: [{"plan", "steps", "straggler": {"rank",
// "device_type", "node", "idle_share"}, "idle_share": {rank: share}}]; with `busy`, per
// device type the plan predicts: the median over its ranks' steps (after the first) of
// compute_s beside the prediction, {type: {"measured_s", "predicted_s", "ratio"}}.
nlohmann::json StragglerReport(const std::vector<RankRecords>& ranks, const PredictedBusy& predicted = {});

// The ranks' records from `run_dir`/metrics/rank-N.jsonl, N from 0 to the size of
// `ranks` (node and device type of each); lines that are not JSON are left out.
std::vector<RankRecords> ReadRankRecords(const std::string& run_dir, const std::vector<std::string>& nodes,
                                         const std::vector<std::string>& device_types);

}  // namespace poplar
