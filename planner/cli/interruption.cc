#include "planner/cli/interruption.h"

#include <atomic>
#include <csignal>

namespace poplar {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Interruptions are made and ended on the head's main thread; the handler only records.
std::atomic<int> g_received{0};  // the first signal since the outermost Interruption began
int g_depth = 0;                 // Interruptions alive
void (*g_replaced[3])(int) = {};  // the handlers the outermost one replaced

extern "C" void OnSignal(int signal_number) {
  int none = 0;
  g_received.compare_exchange_strong(none, signal_number);
}

}  // namespace

Interruption::Interruption() {
  if (g_depth++ > 0) return;  // the outer one's handlers are in place
  g_received = 0;
  for (int i = 0; i < 3; ++i) {
    g_replaced[i] = std::signal(kSignals[i], OnSignal);
    // A signal ignored already stays ignored: under nohup, SIGHUP must not stop a job.
    if (g_replaced[i] == SIG_IGN) std::signal(kSignals[i], SIG_IGN);
  }
}

Interruption::~Interruption() {
  if (--g_depth > 0) return;
  for (int i = 0; i < 3; ++i) std::signal(kSignals[i], g_replaced[i]);
}

int Interruption::signal() const { return g_received; }

std::string InterruptionName(int signal) {
  switch (signal) {
    case SIGINT: return "Ctrl-C";
    case SIGHUP: return "SIGHUP: its terminal closed; nohup, tmux or systemd-run let a launch outlive its terminal";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace poplar
