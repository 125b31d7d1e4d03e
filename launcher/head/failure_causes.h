// The root cause of a failed job, chosen among everything that went wrong: when one rank
// fails, its peers lose their connections, the head stops the other nodes, and every
// node reports something. FailureCauses ranks those reports so that the one that
// started it is what the user reads. Plain values in, text out: no gRPC.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace poplar {

class FailureCauses {
 public:
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
  // The head stops the job to take back a node that answers again (poplar launch
  // --elastic): a stop, as above, which TakeBack names when nothing outranks it.
  void TakingBack(const std::string& reason);

  // The job's first failure came just after the head itself did not run for `seconds`
  // (suspended with Ctrl-Z or SIGSTOP, its machine paused, its output blocked). When
  // that failure is a lost connection (a node's stream broke, its agent was lost), the
  // stall is the root cause, whatever the nodes say (they saw a silent head; the head's
  // keepalive, a silent node). A failure of another kind
  // (a rank out of memory while the head's output was blocked) stays the cause, and the
  // stall is mentioned after it. The caller decides that the two are close in time.
  void HeadStalled(double seconds);

  bool failed() const { return !failures_.empty(); }
  // "node 'b': rank 1 was killed by signal 9 (Killed)", or the head's stall.
  std::string RootCause() const;
  // "stopped by the user (Ctrl-C)" when the user's stop is the root cause (no failure of
  // the job's came before it); empty otherwise.
  std::string UserStop() const;
  // The reason of TakingBack when it is the root cause; empty otherwise.
  std::string TakeBack() const;

 private:
  struct Failed {
    int severity;
    std::string node;
    std::string reason;
    enum class Kind { kJob, kConnection, kUser, kTakeBack };
    Kind kind = Kind::kJob;  // kConnection: a stream that broke or an agent lost
  };
  // The failure RootCause names when the head did not stall: the most telling.
  const Failed& MostTelling() const;

  std::vector<Failed> failures_;
  double head_stalled_s_ = 0;  // the longest HeadStalled
};

}  // namespace poplar
