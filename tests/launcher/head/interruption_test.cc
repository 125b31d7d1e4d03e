// The head's Interruption: Ctrl-C, SIGTERM and SIGHUP are recorded while one lives (the
// process goes on to stop what it started), and end the process as usual after it.
#include "launcher/head/interruption.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

namespace poplar {
namespace {

// The handler installed for `signal_number` now.
void (*HandlerOf(int signal_number))(int) {
  struct sigaction action {};
  sigaction(signal_number, nullptr, &action);
  return action.sa_handler;
}

TEST(Interruption, RecordsTheFirstSignalAndPutsTheHandlersBack) {
  // As a shell leaves them (a test run under nohup starts with SIGHUP ignored).
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal_number, SIG_DFL);
  {
    const Interruption outer;
    EXPECT_EQ(outer.signal(), 0);
    std::raise(SIGTERM);  // without the handler, this would end the test program
    EXPECT_EQ(outer.signal(), SIGTERM);
    {
      const Interruption inner;  // a wait within the launch sees the launch's signal
      EXPECT_EQ(inner.signal(), SIGTERM);
    }
    EXPECT_NE(HandlerOf(SIGHUP), SIG_DFL) << "the inner one took the outer one's handlers away";
  }
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) EXPECT_EQ(HandlerOf(signal_number), SIG_DFL);
  const Interruption next;
  EXPECT_EQ(next.signal(), 0) << "a new one starts with no signal";
}

// A second Ctrl-C ends the process at once, as the signal would without a handler: the
// user will not wait for an orderly stop that hangs (an agent that does not answer). A
// repeated SIGTERM or SIGHUP (a closing terminal sends SIGHUP more than once) waits for
// the orderly stop.
TEST(Interruption, ASecondCtrlCEndsTheProcessAtOnce) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        std::signal(SIGINT, SIG_DFL);
        std::signal(SIGTERM, SIG_DFL);
        std::signal(SIGHUP, SIG_DFL);
        const Interruption interruption;
        std::raise(SIGTERM);
        std::raise(SIGHUP);
        std::raise(SIGTERM);
        if (interruption.signal() != SIGTERM) std::_Exit(3);
        std::raise(SIGINT);
        std::_Exit(4);  // not reached
      },
      ::testing::KilledBySignal(SIGINT), "");
  EXPECT_EXIT(
      {
        std::signal(SIGINT, SIG_DFL);
        const Interruption interruption;
        std::raise(SIGINT);
        std::raise(SIGINT);
        std::_Exit(4);  // not reached
      },
      ::testing::KilledBySignal(SIGINT), "press Ctrl-C again to end at once");
}

// Under nohup SIGHUP is ignored, and must stay so: a job started under nohup does not
// stop when its terminal closes.
TEST(Interruption, LeavesAnIgnoredSignalIgnored) {
  std::signal(SIGHUP, SIG_IGN);
  {
    const Interruption interruption;
    EXPECT_EQ(HandlerOf(SIGHUP), SIG_IGN);
    std::raise(SIGHUP);
    EXPECT_EQ(interruption.signal(), 0);
    std::raise(SIGTERM);
    EXPECT_EQ(interruption.signal(), SIGTERM) << "the others are still handled";
  }
  EXPECT_EQ(HandlerOf(SIGHUP), SIG_IGN);
  std::signal(SIGHUP, SIG_DFL);
}

TEST(Interruption, NamesTheSignalsInAUsersWords) {
  EXPECT_EQ(InterruptionName(SIGINT), "Ctrl-C");
  EXPECT_EQ(InterruptionName(SIGTERM), "SIGTERM");
  EXPECT_EQ(InterruptionName(SIGHUP).rfind("SIGHUP: its terminal closed", 0), 0u);
}

}  // namespace
}  // namespace poplar
