// One Slurm job step of a plan's ranks (poplar launch --slurm): the head starts one
// `srun` of every rank and follows it as RunAgentJob follows the agents' streams.
// srun labels each task's output lines with its task id, which is the rank ("1: ...");
// each rank's metrics file (on a file system the head shares with the nodes) is tailed
// every 100 ms. Every line and record goes to the LaunchMonitor, and srun's report of
// a task that failed ("task 1: Exited with exit code 3") becomes that rank's failure.
// Slurm itself ends the step when a task fails (--kill-on-bad-exit). Ctrl-C, SIGTERM or
// SIGHUP (scancel included) stop the step: srun passes SIGTERM on to every task, which
// lets rank 0 finish a checkpoint in flight; a step not ended the job's stop grace
// plus 15 s later is aborted (two SIGINTs, srun's "terminate the step"), and srun
// itself is killed 10 s after that.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "launcher/head/interruption.h"
#include "launcher/head/launch_monitor.h"

namespace poplar {

struct SrunStep {
  std::string srun;               // absolute path of srun
  std::vector<std::string> args;  // after argv[0]: srun's options, then the program and its arguments
  std::vector<std::string> env;   // srun's whole environment ("NAME=value"), the allocation's SLURM_* among it
  std::string cwd;
  std::vector<std::string> metrics_files;  // rank r's metrics file, read from its start
  std::vector<std::string> nodes;          // rank r's node, for the failures
  int cpus_per_rank = 0;                   // srun's --cpus-per-task; 0: srun's default (one)
  std::chrono::seconds stop_grace{30};
};

struct SrunOutcome {
  bool started = false;  // srun ran (else it could not start: the monitor has why)
  int signal = 0;        // SIGINT, SIGTERM or SIGHUP when the user stopped the step, else 0
  int exit_code = 0;     // srun's: the highest of its tasks'
};

// A failed task as srun reports it: "srun: error: NODE: task 1: Exited with exit code
// 3", or "tasks 0-1,3: Terminated". The ranks and the failure in the words the head
// ranks failures by (failure_causes.h): "exited with status 3", "was killed by signal
// 15 (Terminated)", with its exit status (128 + the signal). Nullopt for other lines.
struct TaskFailure {
  std::vector<int> ranks;
  std::string what;
  int exit_code = 1;
};
std::optional<TaskFailure> ParseTaskFailure(const std::string& line);

// Runs `step` until srun has ended. `on_metrics` gets each metrics record after the
// monitor; it may write plan switches for rank 0 to read.
SrunOutcome RunSrunStep(const SrunStep& step, LaunchMonitor& monitor, const Interruption& interruption,
                        std::ostream& out,
                        const std::function<void(int rank, const std::string& line)>& on_metrics = {});

}  // namespace poplar
