#include "launcher/head/failure_causes.h"

#include <algorithm>
#include <csignal>

#include "planner/base/command_failed.h"
#include "planner/base/text_table.h"

namespace poplar {
namespace {

// How likely a failure is the root cause, most likely first.
constexpr int kKilled = 0;    // a rank killed by a signal it did not get from poplar
constexpr int kCause = 1;     // a rank failing on its own, or a node losing its agent
constexpr int kLostPeer = 2;  // a rank failing because a peer went away
constexpr int kStopped = 3;   // poplar stopping the job, and what that stop led to

// A reason without an exit status (a node's final reason, a stop), or from a worker
// before kPeerFailureExitStatus: by its words.
int SeverityOfText(const std::string& reason) {
  auto has = [&](const char* text) { return reason.find(text) != std::string::npos; };
  // "failed elsewhere": the head's own stop, echoed back by a node it stopped; "the
  // stop's grace over": the agent's SIGKILL of a rank slow to stop (agent/job.cc).
  if (has("stopped by") || has("head node went away") || has("signal 15") || has("failed elsewhere") ||
      has("the stop's grace over")) {
    return kStopped;
  }
  // "(its error says why)": a worker pointing at another rank's failure (launcher/worker/resume.cc).
  if (has("onnection") || has("peer") || has("Timed out") || has("timed out") || has("Timeout") ||
      has("within --timeout") || has("Broken pipe") || has("(its error says why)")) {
    return kLostPeer;
  }
  if (has("killed by signal")) return kKilled;
  return kCause;
}

// A rank's exit, by its status.
int SeverityOfExit(int status, const std::string& reason) {
  // SIGTERM is poplar's stop; SIGKILL after it, the agent's end of the stop's grace
  // (agent/job.cc says so in the reason).
  if (status == 128 + SIGTERM || reason.find("the stop's grace over") != std::string::npos) return kStopped;
  if (status > 128) return kKilled;
  if (status == kPeerFailureExitStatus) return kLostPeer;
  return kCause;
}

}  // namespace

void FailureCauses::Failure(const std::string& node, const std::string& reason, std::optional<int> exit_status) {
  int severity = exit_status ? SeverityOfExit(*exit_status, reason) : SeverityOfText(reason);
  if (!exit_status) {
    // A node's final reason repeats the exit of its first failed rank.
    for (const Failed& failed : failures_) {
      if (failed.node == node && failed.reason == reason) severity = failed.severity;
    }
  }
  failures_.push_back({severity, node, reason});
}

void FailureCauses::Stopped(const std::string& node, const std::string& reason) {
  failures_.push_back({kStopped, node, reason, Failed::Kind::kConnection});
}

void FailureCauses::UserStopped(const std::string& how) {
  failures_.push_back({kStopped, "head", "stopped by the user (" + how + ")", Failed::Kind::kUser});
}

void FailureCauses::TakingBack(const std::string& reason) {
  failures_.push_back({kStopped, "head", reason, Failed::Kind::kTakeBack});
}

void FailureCauses::AgentLost(const std::string& node, const std::string& reason) {
  failures_.push_back({kCause, node, reason, Failed::Kind::kConnection});
}

void FailureCauses::HeadStalled(double seconds) { head_stalled_s_ = std::max(head_stalled_s_, seconds); }

std::string FailureCauses::RootCause() const {
  if (failures_.empty()) return "";
  const std::string seconds = Fixed(head_stalled_s_, 0) + " s";
  // A stall long enough for the agents to give up on the head explains the failures
  // that followed when the first of them is a dropped connection, or when, whatever
  // order they arrived in (a stopped rank's exit may come before its node's stream is
  // seen to drop), none is the job's own: a rank failing or killed by itself stays the
  // cause.
  const bool failed_on_its_own = std::any_of(failures_.begin(), failures_.end(), [](const Failed& failure) {
    return failure.kind == Failed::Kind::kJob && failure.severity <= kCause;
  });
  if (head_stalled_s_ > 0 && (failures_.front().kind == Failed::Kind::kConnection || !failed_on_its_own)) {
    return "the head (this poplar launch) was stalled for " + seconds +
           " (suspended with Ctrl-Z or SIGSTOP, its machine paused, or its output blocked), long enough for "
           "the agents to give up on it (they wait 10 to 20 s for a silent peer), so the job was stopped; run it "
           "under tmux, nohup or systemd-run, and resume with --resume";
  }
  const Failed& best = MostTelling();
  const std::string cause = "node '" + best.node + "': " + best.reason;
  return head_stalled_s_ > 0
             ? cause + "; the head (this poplar launch) had been stalled for " + seconds + " just before"
             : cause;
}

const FailureCauses::Failed& FailureCauses::MostTelling() const {
  const Failed* best = &failures_.front();
  for (const auto& failure : failures_) {
    if (failure.severity < best->severity) best = &failure;
  }
  return *best;
}

std::string FailureCauses::UserStop() const {
  if (failures_.empty() || head_stalled_s_ > 0) return "";
  const Failed& best = MostTelling();
  return best.kind == Failed::Kind::kUser ? best.reason : "";
}

std::string FailureCauses::TakeBack() const {
  if (failures_.empty() || head_stalled_s_ > 0) return "";
  const Failed& best = MostTelling();
  return best.kind == Failed::Kind::kTakeBack ? best.reason : "";
}

}  // namespace poplar
