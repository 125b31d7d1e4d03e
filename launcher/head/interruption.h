// Ctrl-C (SIGINT), SIGTERM and SIGHUP while the head waits on agents: while an
// Interruption lives, those signals are recorded instead of ending the process, and the
// waiting code polls signal() and ends what it started in order (stops the job on every
// node, cancels the agents' measurements), so that destructors run and nothing is left
// half-written; a second Ctrl-C ends the process at once. Outside one, they end the
// process as usual. A signal that was ignored
// already (SIGHUP under nohup) stays ignored. Interruptions may nest; the first signal
// of an outer one is seen by the inner ones too.
#pragma once

#include <string>

namespace poplar {

class Interruption {
 public:
  Interruption();   // installs the handlers
  ~Interruption();  // puts back those it replaced
  Interruption(const Interruption&) = delete;
  Interruption& operator=(const Interruption&) = delete;

  // The first of the three signals received while this lived, 0 while none has.
  int signal() const;
};

// How a user reads `signal` as a reason: "Ctrl-C", "SIGTERM", "SIGHUP: its terminal
// closed; ...".
std::string InterruptionName(int signal);

}  // namespace poplar
