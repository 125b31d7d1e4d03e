// The failures a command reports with an exit status of its own (RunApp, run_app.h),
// apart from bad input (InputError, 1) and bad usage (2). Header-only and free of CLI11,
// so that the worker's torch side can throw them.
#pragma once

#include <stdexcept>
#include <string>

namespace poplar {

// A command that ran and failed for a reason outside the program (a training job that
// failed, an agent that is unreachable): RunApp prints "speaker: error: what" and exits
// with `exit_code`.
class CommandFailed : public std::runtime_error {
 public:
  CommandFailed(const std::string& message, int exit_code = 1) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// poplar-worker's exit status when it failed because another rank did: that rank left
// the job, never came, or stopped first and said so. Status 1 is a rank failing on its
// own. The head names the job's root cause by these (launcher/head/launch_monitor.cc): a
// rank's own failure before a peer's consequence of it.
constexpr int kPeerFailureExitStatus = 3;

// An error whose cause is another rank's failure, which that rank's own error names.
class PeerFailure : public CommandFailed {
 public:
  explicit PeerFailure(const std::string& message) : CommandFailed(message, kPeerFailureExitStatus) {}
};

}  // namespace poplar
