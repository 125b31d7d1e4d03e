#include "launcher/head/interruption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace poplar {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kSignalCount = static_cast<int>(std::size(kSignals));

// Interruptions are made and ended on the head's main thread; the handler only records,
// and on a second Ctrl-C ends the process (all async-signal-safe).
std::atomic<int> g_received{0};             // the first signal since the outermost Interruption began
int g_depth = 0;                            // Interruptions alive
struct sigaction g_replaced[kSignalCount];  // what the outermost one replaced
bool g_installed[kSignalCount] = {};        // false where the signal was ignored (nohup)

extern "C" void OnSignal(int signal_number) {
  const int saved_errno = errno;
  int none = 0;
  if (g_received.compare_exchange_strong(none, signal_number)) {
    if (signal_number == SIGINT) {  // someone at a terminal, who may be kept waiting
      constexpr char kNote[] = "poplar: stopping in order; press Ctrl-C again to end at once\n";
      [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, kNote, sizeof kNote - 1);
    }
  } else if (signal_number == SIGINT) {
    // A second Ctrl-C: the user will not wait for the orderly stop (an agent that does
    // not answer, a search that runs on). The agents stop the job when its head is gone.
    // A repeated SIGTERM or SIGHUP is not a person's (a closing terminal sends SIGHUP
    // more than once; a wrapper forwards SIGTERM): it waits for the orderly stop.
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
  }
  errno = saved_errno;
}

}  // namespace

Interruption::Interruption() {
  if (g_depth++ > 0) return;  // the outer one's handlers are in place
  g_received = 0;
  struct sigaction handler;
  std::memset(&handler, 0, sizeof handler);
  handler.sa_handler = OnSignal;
  sigemptyset(&handler.sa_mask);
  handler.sa_flags = SA_RESTART;
  for (int i = 0; i < kSignalCount; ++i) {
    sigaction(kSignals[i], nullptr, &g_replaced[i]);
    // A signal ignored already stays ignored: under nohup, SIGHUP must not stop a job
    // (read before installing, so that no SIGHUP slips in between).
    g_installed[i] = g_replaced[i].sa_handler != SIG_IGN;
    if (g_installed[i]) sigaction(kSignals[i], &handler, nullptr);
  }
}

Interruption::~Interruption() {
  if (--g_depth > 0) return;
  for (int i = 0; i < kSignalCount; ++i) {
    if (g_installed[i]) sigaction(kSignals[i], &g_replaced[i], nullptr);
  }
}

int Interruption::signal() const { return g_received; }

std::string InterruptionName(int signal) {
  switch (signal) {
    case SIGINT:
      return "Ctrl-C";
    case SIGHUP:
      return "SIGHUP: its terminal closed; nohup, tmux or systemd-run let a launch outlive its terminal";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(signal);
  }
}

}  // namespace poplar
