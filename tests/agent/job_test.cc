// Job supervision with real processes (/bin/sh scripts): events, the first failure
// stopping the other ranks, Stop(), metrics tailing, and no process left behind.
#include "agent/job.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>

#include "test_support.h"

namespace poplar {
namespace {

using poplar::testing::Contains;
using poplar::testing::ScratchDir;

RankProcess Shell(int rank, const std::string& script, const ScratchDir& dir) {
  RankProcess process;
  process.rank = rank;
  process.spec = {"/bin/sh", {"-c", script}, InheritedEnvironment(), dir.path()};
  process.metrics_path = dir.path() + "/metrics-" + std::to_string(rank) + ".jsonl";
  process.log_path = dir.path() + "/rank-" + std::to_string(rank) + ".log";
  return process;
}

std::vector<JobEvent> Drain(Job& job, std::chrono::seconds limit = std::chrono::seconds(30)) {
  std::vector<JobEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  JobEvent event;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!job.Next(&event, std::chrono::milliseconds(100))) continue;
    events.push_back(event);
    if (event.kind == JobEvent::Kind::kFinished || event.kind == JobEvent::Kind::kFailed) break;
  }
  return events;
}

int PidOf(const std::vector<JobEvent>& events, int rank) {
  for (const auto& event : events) {
    if (event.kind == JobEvent::Kind::kStarted && event.rank == rank) return std::stoi(event.text.substr(4));
  }
  return -1;
}

TEST(Job, ReportsOutputMetricsExitsAndSuccess) {
  ScratchDir dir("job");
  Spawner spawner;
  Job job("ok", {Shell(0, "echo hello; echo '{\"step\": 1, \"loss\": 2.5}' >> metrics-0.jsonl; sleep 0.3", dir)});
  job.Start(spawner);
  const auto events = Drain(job);
  ASSERT_FALSE(events.empty());
  bool saw_output = false, saw_metrics = false;
  for (const auto& event : events) {
    saw_output = saw_output || (event.kind == JobEvent::Kind::kOutput && event.text == "hello");
    saw_metrics = saw_metrics || (event.kind == JobEvent::Kind::kMetrics && Contains(event.text, "\"loss\": 2.5"));
  }
  EXPECT_TRUE(saw_output);
  EXPECT_TRUE(saw_metrics);
  EXPECT_EQ(events.back().kind, JobEvent::Kind::kFinished);
  EXPECT_EQ(job.last_step(), 1);
  std::ifstream log(dir.path() + "/rank-0.log");
  std::string first;
  std::getline(log, first);
  EXPECT_EQ(first, "hello");
}

TEST(Job, FirstFailureStopsTheOtherRanksAndNamesTheRank) {
  ScratchDir dir("job");
  Spawner spawner;
  Job job("fail", {Shell(0, "exec sleep 60", dir), Shell(1, "sleep 0.3; echo 'rank 1 broke'; exit 3", dir)},
          std::chrono::seconds(2));
  const auto start = std::chrono::steady_clock::now();
  job.Start(spawner);
  const auto events = Drain(job);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // the sleeper did not run its 60 s
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, JobEvent::Kind::kFailed);
  EXPECT_TRUE(Contains(events.back().text, "rank 1 exited with status 3: rank 1 broke"));
  const int sleeper = PidOf(events, 0);
  ASSERT_GT(sleeper, 0);
  EXPECT_EQ(kill(sleeper, 0), -1);  // reaped: no such process
}

TEST(Job, StopEscalatesToSigkillForRanksThatIgnoreSigterm) {
  ScratchDir dir("job");
  Spawner spawner;
  Job job("stubborn", {Shell(0, "trap '' TERM; echo ready; while true; do sleep 0.1; done", dir)},
          std::chrono::milliseconds(500));
  job.Start(spawner);
  JobEvent event;
  while (job.Next(&event, std::chrono::seconds(10)) && event.kind != JobEvent::Kind::kOutput) {
  }
  job.Stop("asked to stop");
  const auto events = Drain(job);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, JobEvent::Kind::kFailed);
  EXPECT_EQ(events.back().text, "asked to stop");
  bool killed = false;
  for (const auto& e : events) {
    if (e.kind != JobEvent::Kind::kExited || e.exit_code != 128 + SIGKILL) continue;
    killed = true;
    // Said as the stop's doing, so that the head never takes it for a cause.
    EXPECT_TRUE(Contains(e.text, "by its agent, the stop's grace over")) << e.text;
  }
  EXPECT_TRUE(killed);
}

// The head stops a job on every node when one node refuses it, which can reach a node
// before its ranks start: they must not start then (they ran unwatched, holding the
// device, until their rendezvous timed out).
TEST(Job, AJobStoppedBeforeItStartsStartsNothing) {
  ScratchDir dir("job");
  Spawner spawner;
  Job job("early-stop", {Shell(0, "echo started; sleep 60", dir), Shell(1, "echo started; sleep 60", dir)});
  job.Stop("node 'a' refused the job");
  const auto start = std::chrono::steady_clock::now();
  job.Start(spawner);
  const auto events = Drain(job);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // nothing slept its 60 s
  ASSERT_FALSE(events.empty());
  for (const auto& event : events) EXPECT_NE(event.kind, JobEvent::Kind::kStarted) << event.text;
  EXPECT_EQ(events.back().kind, JobEvent::Kind::kFailed);
  EXPECT_EQ(events.back().text, "node 'a' refused the job");
}

// The agent blocks SIGTERM in its threads for sigwait; its children must not inherit
// that, or every stop waits out the grace period and ends in SIGKILL.
TEST(Job, RanksStartWithNoSignalBlocked) {
  ScratchDir dir("job");
  sigset_t terminate, previous;
  sigemptyset(&terminate);
  sigaddset(&terminate, SIGTERM);
  sigaddset(&terminate, SIGINT);
  pthread_sigmask(SIG_BLOCK, &terminate, &previous);
  Spawner spawner;  // its thread inherits the mask, as the agent's does
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  Job job("mask", {Shell(0, "grep SigBlk /proc/self/status; echo ready; exec sleep 60", dir)},
          std::chrono::seconds(20));
  job.Start(spawner);
  JobEvent event;
  std::string blocked;
  while (job.Next(&event, std::chrono::seconds(10)) &&
         !(event.kind == JobEvent::Kind::kOutput && event.text == "ready")) {
    if (event.kind == JobEvent::Kind::kOutput) blocked = event.text;
  }
  EXPECT_EQ(blocked, "SigBlk:\t0000000000000000");
  const auto stop = std::chrono::steady_clock::now();
  job.Stop("asked to stop");
  const auto events = Drain(job);
  // The grace before SIGKILL is 20 s.
  EXPECT_LT(std::chrono::steady_clock::now() - stop, std::chrono::seconds(15)) << "SIGTERM did not end the rank";
  bool terminated = false;
  for (const auto& e : events)
    terminated = terminated || (e.kind == JobEvent::Kind::kExited && e.exit_code == 128 + SIGTERM);
  EXPECT_TRUE(terminated);
}

TEST(Job, AProgramThatCannotStartFailsTheJob) {
  ScratchDir dir("job");
  Spawner spawner;
  RankProcess missing = Shell(0, "", dir);
  missing.spec.program = dir.path() + "/no-such-program";
  Job job("missing", {missing});
  job.Start(spawner);
  const auto events = Drain(job);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, JobEvent::Kind::kFailed);
  EXPECT_TRUE(Contains(events.back().text, "could not start"));
}

}  // namespace
}  // namespace poplar
