#include "launcher/stop_signals.h"

#include <atomic>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

namespace poplar {
namespace {

// Shared with the handler: lock-free atomics are async-signal-safe.
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_checkpoint_in_flight{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

// The signal's default action, now, on this thread. Async-signal-safe.
[[noreturn]] void DieBy(int signal_number) {
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(signal_number, &action, nullptr);
  sigset_t only;
  ::sigemptyset(&only);
  ::sigaddset(&only, signal_number);
  ::pthread_sigmask(SIG_UNBLOCK, &only, nullptr);  // a handler runs with its signal blocked
  ::raise(signal_number);
  ::_exit(128 + signal_number);  // not reached: SIGTERM and SIGINT terminate
}

void OnStop(int signal_number) {
  int before = 0;
  const bool first = g_stop_signal.compare_exchange_strong(before, signal_number);
  if (!first || !g_checkpoint_in_flight.load()) DieBy(signal_number);
  // Only rank 0 writes checkpoints.
  static constexpr char kSaid[] =
      "poplar-worker[rank 0]: stopping once the checkpoint in flight is on the disk (a second stop ends it now)\n";
  (void)!::write(STDERR_FILENO, kSaid, sizeof(kSaid) - 1);
}

void Handle(int signal_number) {
  struct sigaction before = {};
  ::sigaction(signal_number, nullptr, &before);
  if (before.sa_handler == SIG_IGN) return;
  struct sigaction action = {};
  action.sa_handler = OnStop;
  ::sigemptyset(&action.sa_mask);
  ::sigaddset(&action.sa_mask, SIGTERM);  // one handler at a time: the other stop waits its turn
  ::sigaddset(&action.sa_mask, SIGINT);
  action.sa_flags = SA_RESTART;
  ::sigaction(signal_number, &action, nullptr);
}

}  // namespace

void InstallStopHandlers() {
  Handle(SIGTERM);
  Handle(SIGINT);
}

void SetCheckpointInFlight(bool in_flight) {
  g_checkpoint_in_flight.store(in_flight);
  // After the store: a stop that saw in_flight true is seen here (both sequentially
  // consistent), so no stop is left waiting for a checkpoint that is done.
  if (!in_flight && g_stop_signal.load() != 0) EndByStopSignal();
}

int StopRequested() { return g_stop_signal.load(); }

void EndByStopSignal() { DieBy(g_stop_signal.load()); }

}  // namespace poplar
