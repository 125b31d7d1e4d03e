// Spawner: starts child processes so that none can outlive their owner (the agent's
// workers and profiles; the head's srun under Slurm).
//
// Every child is started from one thread that lives as long as the Spawner (its
// owner's lifetime), because Linux delivers PR_SET_PDEATHSIG when the *thread* that
// forked a child exits, not the process: forking from a gRPC handler thread, which the
// server may retire at any time, would kill healthy workers. Each child:
//   - gets SIGKILL if its owner dies (PR_SET_PDEATHSIG), even by SIGKILL;
//   - leads its own process group, so a stop reaches anything it starts;
//   - has stdin from /dev/null and stdout and stderr on one pipe the caller reads;
//   - gets exactly the environment given, and the working folder given.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace poplar {

struct SpawnSpec {
  std::string program;            // absolute path; run as argv[0]
  std::vector<std::string> args;  // after argv[0]
  std::vector<std::string> env;   // "NAME=value", the whole environment
  std::string cwd;
};

struct Spawned {
  pid_t pid = -1;
  int output_fd = -1;  // read end of the child's stdout+stderr; the caller closes it
};

class Spawner {
 public:
  Spawner();
  ~Spawner();
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  // Starts the process; throws std::runtime_error naming the program and errno's text
  // when it cannot be started (exec failures are reported, not left to the child).
  Spawned Spawn(const SpawnSpec& spec);

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

// The environment variables a worker inherits from the agent (PATH, LD_LIBRARY_PATH,
// HOME, LANG, TMPDIR, NCCL_*/GLOO_* settings, and OpenBLAS's kernel settings, such as
// OPENBLAS_CORETYPE, but not OPENBLAS_NUM_THREADS), as "NAME=value": the same arithmetic
// as a worker started by hand or by srun, which inherit them too.
std::vector<std::string> InheritedEnvironment();
// This process's whole environment, as "NAME=value": what srun's tasks inherit.
std::vector<std::string> WholeEnvironment();

// A child's wait status (waitpid) as the shell's exit code: its exit status, or 128 plus
// the signal that killed it.
int ExitCodeOf(int wait_status);

// A child's wait status in words, for messages that name the child first: "exited with
// status 1", or "was killed by signal 9 (Killed)". The head ranks a job's failures by
// these words (launcher/head/launch_monitor.cc).
std::string DescribeWaitStatus(int wait_status);

}  // namespace poplar
