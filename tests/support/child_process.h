// Child processes for end-to-end tests: real binaries started with fork/exec, stdin
// from /dev/null, stdout and stderr to files, extra environment variables, a working
// folder, and a deadline after which the child is killed (so a hung test ends).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace poplar::testing {

struct ChildOptions {
  std::vector<std::string> argv;           // argv[0] is the program's path
  std::map<std::string, std::string> env;  // added to (or replacing in) the parent's
  std::string cwd;                         // empty: the parent's
  std::string stdout_path = "/dev/null";
  std::string stderr_path = "/dev/null";
};

// Options that run `argv` with everything else at its default.
inline ChildOptions Command(std::vector<std::string> argv) {
  ChildOptions options;
  options.argv = std::move(argv);
  return options;
}

class ChildProcess {
 public:
  explicit ChildProcess(const ChildOptions& options);  // starts it
  ~ChildProcess();                                     // kills it if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Exit status, 128 + signal if killed by one; -1 if the deadline passed (then the
  // child is killed with SIGKILL and reaped).
  int Wait(std::chrono::milliseconds deadline);
  void Signal(int signal_number);
  bool finished() const { return finished_; }

 private:
  pid_t pid_ = -1;
  bool finished_ = false;
  int status_ = -1;
};

struct ProcessOutcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs to completion (or the deadline), with stdout and stderr captured through files
// in `io_folder`.
ProcessOutcome RunProcess(ChildOptions options, const std::string& io_folder,
                          std::chrono::milliseconds deadline = std::chrono::seconds(120));

std::string ReadWholeFile(const std::string& path);

}  // namespace poplar::testing
