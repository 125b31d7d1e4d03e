#include "launcher/worker/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>

namespace poplar {
namespace {

// Shared with the handler: lock-free atomics are async-signal-safe.
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_checkpoint_in_flight{false};
std::atomic<long long> g_first_stop_ns{0};  // CLOCK_MONOTONIC
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
              std::atomic<long long>::is_always_lock_free);

// A stop this soon after the first is the same stop arriving twice (the agent signals the
// rank's process group while a scheduler signals every process of the job; a terminal's
// Ctrl-C reaches a wrapper that passes it on), not a user asking again.
constexpr long long kSecondStopAfterNs = 1'000'000'000;

long long MonotonicNs() {  // clock_gettime is async-signal-safe
  timespec now = {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

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
  const int saved_errno = errno;  // of the code this interrupts
  const long long now = MonotonicNs();
  int before = 0;
  const bool first = g_stop_signal.compare_exchange_strong(before, signal_number);
  if (first) g_first_stop_ns.store(now);
  if (!g_checkpoint_in_flight.load()) DieBy(signal_number);
  if (!first) {
    // 0: the first is still in its handler on another thread, so this is the same stop.
    const long long first_at = g_first_stop_ns.load();
    if (first_at != 0 && now - first_at >= kSecondStopAfterNs) DieBy(signal_number);
    errno = saved_errno;
    return;
  }
  // Only rank 0 writes checkpoints.
  static constexpr char kSaid[] =
      "poplar-worker[rank 0]: stopping once the checkpoint in flight is on the disk (a second stop ends it now)\n";
  (void)!::write(STDERR_FILENO, kSaid, sizeof(kSaid) - 1);
  errno = saved_errno;
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
