// `poplar-worker train` for one rank of a job: the command line an agent starts
// (agent/node_job.cc) and the one `poplar launch --slurm` writes into ranks.sh
// (launcher/head/slurm_launch.cc). Each side keeps the job's files where it keeps them
// (TrainFiles); the flags, their order and what they mean are this one function's. The
// device's flags and the rendezvous environment are the caller's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace poplar {

// Where one job's files are, as the ranks reach them. `metrics` and `trace` hold
// "{rank}", which each worker replaces with its rank.
struct TrainFiles {
  std::string plan;           // the plan the job starts with
  std::string model;          // the model configuration
  std::string metrics;        // each rank's metrics (JSON Lines)
  std::string checkpoints;    // the job's checkpoint folder
  std::string plan_switches;  // the folder the head hands rank 0 new plans in
  std::string save;           // the final weights (model.pt or model.safetensors)
  std::string trace;          // each rank's trace, written when trace_step > 0
};

// What else shapes a rank's command: the precision, the job settings' worker flags
// (planner/formats/job_settings.h: WorkerFlags), the step traced (0: none), whether it
// resumes from `files.checkpoints` and must find a checkpoint there, and the seconds
// before a rendezvous or collective gives up (0: the worker's default).
struct TrainRun {
  std::string precision;
  std::vector<std::string> setting_flags;
  std::int64_t trace_step = 0;
  bool resume = false;
  bool require_checkpoint = false;
  int timeout_s = 0;
};

// The worker's arguments after the program: "train", the files, then the run's flags.
std::vector<std::string> TrainCommand(const TrainFiles& files, const TrainRun& run);

}  // namespace poplar
