// What `poplar launch` makes of its agents' events: the reported root cause, the
// progress line and the run summary.
#include "launcher/head/launch_monitor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "child_process.h"
#include "planner/base/command_failed.h"
#include "planner/base/text_file.h"
#include "test_support.h"

namespace poplar {
namespace {

using poplar::testing::Contains;
using poplar::testing::ContainsAll;
using poplar::testing::ReadWholeFile;
using poplar::testing::ScratchDir;

std::string Record(int step, int rank, double loss, double step_s, double compute_s) {
  return "{\"step\": " + std::to_string(step) + ", \"rank\": " + std::to_string(rank) +
         ", \"loss\": " + std::to_string(loss) + ", \"step_s\": " + std::to_string(step_s) +
         ", \"compute_s\": " + std::to_string(compute_s) + ", \"samples_per_s\": " + std::to_string(24 / step_s) + "}";
}

// Node a runs rank 0 on a "fast" device, node b rank 1 on a "slow" one; 10 steps.
class LaunchMonitorTest : public ::testing::Test {
 protected:
  LaunchMonitor Monitor(int progress_every = 0) {
    return LaunchMonitor(dir_.path(), {{"a", "fast"}, {"b", "slow"}}, 10, progress_every, out_);
  }

  ScratchDir dir_{"monitor"};
  std::ostringstream out_;
};

TEST_F(LaunchMonitorTest, AStreamTheHeadLostNeverOutranksAJobFailure) {
  LaunchMonitor monitor = Monitor();
  // After Ctrl-C the head cancels the streams; their texts match no stop keyword.
  monitor.Stopped("a", "the launch was cancelled");
  monitor.Failure("b", "rank 1 exited with status 1: Connection closed by peer");
  EXPECT_EQ(monitor.RootCause(), "node 'b': rank 1 exited with status 1: Connection closed by peer");
}

TEST_F(LaunchMonitorTest, TheKilledRankIsTheRootCauseWhateverArrivesFirst) {
  LaunchMonitor monitor = Monitor();
  EXPECT_FALSE(monitor.failed());
  monitor.Failure("a",
                  "rank 0 exited with status 1: poplar-worker[rank 0]: error: Read error: Connection reset by peer");
  monitor.Stopped("head", "stopped by the user (Ctrl-C)");
  monitor.Failure("b", "rank 1 was killed by signal 9 (Killed)");
  EXPECT_TRUE(monitor.failed());
  EXPECT_EQ(monitor.RootCause(), "node 'b': rank 1 was killed by signal 9 (Killed)");
}

// An agent killed mid-job: the head stops the other nodes, which echo its reason back
// ("the job failed elsewhere: ..."), and their ranks lose their peers. The lost agent is
// the cause, whatever arrives first.
TEST_F(LaunchMonitorTest, ALostAgentOutranksTheStopsAndResetsItCaused) {
  LaunchMonitor monitor = Monitor();
  monitor.Failure("a", "the job failed elsewhere: node 'b': lost its agent at b:7150 during the job");
  monitor.Failure("a", "rank 0 exited with status 1: Connection reset by peer");
  monitor.AgentLost("b", "lost its agent at b:7150 during the job (did poplar-agent stop, or its node go down?)");
  EXPECT_EQ(monitor.RootCause(),
            "node 'b': lost its agent at b:7150 during the job (did poplar-agent stop, or its node go down?)");
}

// A rank the agent SIGKILLs when the stop's grace runs out was killed by poplar, not by
// the cause; so was a rendezvous that timed out because a peer never came.
TEST_F(LaunchMonitorTest, ThePoplarStopsOwnKillsAndRendezvousTimeOutsAreNotCauses) {
  LaunchMonitor monitor = Monitor();
  monitor.Failure("b", "rank 1 was killed by signal 9 (Killed) (by its agent, the stop's grace over)");
  monitor.Failure("b", "rank 2 exited with status 1: the rendezvous at a:29500 did not complete within --timeout");
  monitor.Failure("a", "rank 0 exited with status 1: out of memory on emulated device");
  EXPECT_EQ(monitor.RootCause(), "node 'a': rank 0 exited with status 1: out of memory on emulated device");
}

// A worker that points at another rank's failure is not the cause: the rank it names is.
TEST_F(LaunchMonitorTest, ARankPointingAtAnothersErrorIsNotTheCause) {
  LaunchMonitor monitor = Monitor();
  monitor.Failure("b", "rank 1 exited with status 1: rank 0 cannot read its --resume checkpoint (its error says why)");
  monitor.Failure("a", "rank 0 exited with status 1: checkpoints/step-00000004/meta.json: not valid JSON");
  EXPECT_EQ(monitor.RootCause(),
            "node 'a': rank 0 exited with status 1: checkpoints/step-00000004/meta.json: not valid JSON");
}

TEST_F(LaunchMonitorTest, AFailingRankOutranksPeersThatLostIt) {
  LaunchMonitor monitor = Monitor();
  monitor.Failure("a", "rank 0 exited with status 1: Connection closed by peer");
  monitor.Failure("b", "rank 1 exited with status 1: out of memory on emulated device");
  EXPECT_EQ(monitor.RootCause(), "node 'b': rank 1 exited with status 1: out of memory on emulated device");
}

// With the exit status the agents report, the ranking goes by what each rank said it
// was (kPeerFailureExitStatus: failed because another rank did), not by words: a rank's
// own error that reads like a lost connection is still the cause, and a peer's
// consequence phrased in no known words is still not. A node's final reason, which
// repeats its first failed rank's, ranks as that exit did.
TEST_F(LaunchMonitorTest, ExitStatusesSayWhichRankFailedOnItsOwn) {
  LaunchMonitor monitor = Monitor();
  const std::string peer = "rank 0 exited with status 3: poplar-worker[rank 0]: error: rank 1 is gone";
  monitor.Failure("a", peer, kPeerFailureExitStatus);
  monitor.Failure("a", peer);  // the node's JOB_FAILED
  const std::string own =
      "rank 1 exited with status 1: poplar-worker[rank 1]: error: --data: cannot read "
      "/mnt/shared/tokens.bin: Connection timed out";
  monitor.Failure("b", own, 1);
  EXPECT_EQ(monitor.RootCause(), "node 'b': " + own);
  // A SIGTERM exit is poplar's stop, any other signal a cause.
  LaunchMonitor stopped = Monitor();
  stopped.Failure("a", "rank 0 was killed by signal 15 (Terminated)", 128 + 15);
  stopped.Failure("b", "rank 1 was killed by signal 11 (Segmentation fault)", 128 + 11);
  EXPECT_EQ(stopped.RootCause(), "node 'b': rank 1 was killed by signal 11 (Segmentation fault)");
}

TEST_F(LaunchMonitorTest, ProgressLinesAndSummary) {
  LaunchMonitor monitor = Monitor(/*progress_every=*/5);
  for (int step = 1; step <= 10; ++step) {
    monitor.Metrics(1, Record(step, 1, 5.0 - step * 0.1, 0.2, 0.18));
    monitor.Metrics(0, Record(step, 0, 5.0 - step * 0.1, step == 1 ? 1.0 : 0.2, 0.1));
  }
  const std::string text = out_.str();
  EXPECT_TRUE(ContainsAll(
      text, {"step 1/10", "step 5/10", "step 10/10  loss 4.0000  120.0 samples/s", "busy fast 50% slow 90%"}));
  EXPECT_EQ(text.find("step 4/10"), std::string::npos);
  monitor.StartingPlan(0.25);
  const auto summary = monitor.Summary();
  EXPECT_EQ(summary["steps"], 10);
  EXPECT_DOUBLE_EQ(summary["measured_step_s"].get<double>(), 0.2);  // the slow first step is warm-up
  EXPECT_NEAR(summary["prediction_error"].get<double>(), 0.25, 1e-9);
  EXPECT_NEAR(summary["samples_per_s"].get<double>(), 120.0, 1e-6);
  EXPECT_EQ(summary["first_step"], 1);
  EXPECT_GT(summary["first_loss"].get<double>(), summary["last_loss"].get<double>());
  std::ifstream metrics(dir_.path() + "/metrics/rank-1.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 10);
}

// A worker that reports its step's learning rate has it shown after the loss.
TEST_F(LaunchMonitorTest, ProgressShowsTheLearningRateWhenReported) {
  LaunchMonitor monitor = Monitor(/*progress_every=*/1);
  monitor.Metrics(0, R"({"step": 1, "rank": 0, "loss": 5.5, "lr": 0.0003, "step_s": 0.2, "samples_per_s": 120})");
  EXPECT_TRUE(ContainsAll(out_.str(), {"step 1/10  loss 5.5000  lr 3.00e-04  120.0 samples/s"})) << out_.str();
}

// A worker writes a nan loss as null, and records come from other nodes: an odd one is
// kept in the run directory and shown as it is, and never stops the head (a null loss
// in the progress line among them).
TEST_F(LaunchMonitorTest, RecordsWithNullsOrOddTypesDoNotStopTheHead) {
  LaunchMonitor monitor = Monitor(/*progress_every=*/1);
  monitor.Metrics(0, R"({"step": 1, "rank": 0, "loss": null, "step_s": 0.5, "compute_s": "x", "samples_per_s": 48})");
  monitor.Metrics(0, R"({"step": "2", "rank": 0, "loss": 1.0})");
  monitor.Metrics(1, R"({"step": 1, "rank": 1, "loss": 3.0, "step_s": null, "compute_s": 0.1})");
  EXPECT_TRUE(ContainsAll(out_.str(), {"step 1/10  loss nan", "48.0 samples/s"})) << out_.str();
  const auto summary = monitor.Summary();
  EXPECT_EQ(summary["steps"], 1);
  EXPECT_TRUE(std::isnan(summary["last_loss"].get<double>()));
}

// A resumed run says where it went on from with rank 0's first step, before its
// progress line, not only in the summary after the run.
TEST_F(LaunchMonitorTest, AResumeSaysAtItsFirstStepWhereItWentOnFrom) {
  LaunchMonitor monitor = Monitor(/*progress_every=*/5);
  monitor.ExpectResume("job-a");
  monitor.Metrics(1, Record(8, 1, 4.0, 0.2, 0.18));  // rank 1's records do not count
  EXPECT_EQ(out_.str(), "");
  monitor.Metrics(0, Record(8, 0, 4.0, 0.2, 0.1));
  const std::string text = out_.str();
  EXPECT_EQ(text.rfind("resumed from the checkpoint of step 7\nstep 8/10  loss 4.0000", 0), 0u) << text;
  monitor.Metrics(0, Record(9, 0, 3.9, 0.2, 0.1));
  EXPECT_EQ(out_.str(), text);  // step 9: no progress line, nothing said again

  std::ostringstream fresh_out;
  LaunchMonitor fresh(dir_.path(), {{"a", "fast"}}, 10, 5, fresh_out);
  fresh.ExpectResume("job-b");
  fresh.Metrics(0, Record(1, 0, 5.0, 0.2, 0.1));
  EXPECT_EQ(fresh_out.str().rfind("no node held a checkpoint of job job-b: training starts from step 0\nstep 1/10", 0),
            0u)
      << fresh_out.str();
}

// A step with a held-out loss gets a progress line showing it, and the summary keeps the
// latest.
TEST_F(LaunchMonitorTest, HeldOutLossesAreShownAndSummarised) {
  LaunchMonitor monitor = Monitor(/*progress_every=*/5);
  const auto evaluating = [](std::int64_t step) {
    auto record = nlohmann::json::parse(Record(step, 0, 5.0 - 0.1 * step, 0.2, 0.1));
    record["eval_every"] = 3;
    return record;
  };
  auto third = evaluating(3);
  third["val_loss"] = 4.25;
  monitor.Metrics(0, evaluating(1).dump());
  monitor.Metrics(0, evaluating(2).dump());
  monitor.Metrics(0, third.dump());
  EXPECT_TRUE(Contains(out_.str(), "step 3/10  loss 4.7000  val loss 4.2500")) << out_.str();
  EXPECT_FALSE(monitor.failed());
  EXPECT_EQ(monitor.Summary()["val_loss"], 4.25);
  EXPECT_EQ(monitor.Summary()["val_step"], 3);

  LaunchMonitor plain = Monitor(5);  // no evaluation asked for: none expected
  plain.Metrics(0, Record(10, 0, 3.0, 0.2, 0.1));
  EXPECT_FALSE(plain.failed());
  EXPECT_FALSE(plain.Summary().contains("val_loss"));
}

// A worker's warning reaches the user's terminal, after its node's name (a resume that
// changes the training would otherwise only be in a log of a run that went well); its
// other lines, and other programs' warnings, only the rank's log.
TEST_F(LaunchMonitorTest, WorkerWarningsAreShownWithTheirNode) {
  LaunchMonitor monitor = Monitor();
  const std::string warning = "poplar-worker[rank 1]: warning: --resume ckpt: this run goes on from step 4 otherwise";
  monitor.Output(1, "poplar-worker[rank 1]: 2 ranks, ZeRO stage 1");
  monitor.Output(1, "[W1126 10:00:00.000] Warning: a libtorch warning: (function operator())");
  monitor.Output(1, warning);
  EXPECT_EQ(out_.str(), "node 'b': " + warning + "\n");
  EXPECT_TRUE(
      ContainsAll(ReadWholeFile(dir_.path() + "/logs/rank-1.log"), {"ZeRO stage 1", "libtorch warning", warning}));
}

// A head that did not run for longer than the keepalive's timeout is the root cause of
// what follows (the nodes saw it silent), but only if the job failed.
TEST_F(LaunchMonitorTest, AStalledHeadIsTheCauseOfTheFailureThatFollows) {
  LaunchMonitor survived = Monitor();
  survived.HeadStalled(12.4);
  EXPECT_FALSE(survived.failed());
  EXPECT_EQ(survived.RootCause(), "");
  LaunchMonitor monitor = Monitor();
  monitor.HeadStalled(42.4);
  monitor.AgentLost("b", "lost its agent at 127.0.0.1:1 during the job: keepalive watchdog timeout");
  monitor.Failure("a", "rank 0 exited with status 1: the head node went away");
  EXPECT_EQ(monitor.RootCause().rfind("the head (this poplar launch) was stalled for 42 s (suspended", 0), 0u)
      << monitor.RootCause();
}

// Which consequence of the stall arrives first does not matter: a rank the agent stopped
// may exit before its node's stream is seen to drop (as under load), and node 'a' is
// still not blamed for losing its agent.
TEST_F(LaunchMonitorTest, AStalledHeadIsTheCauseWhateverItsConsequencesOrder) {
  LaunchMonitor monitor = Monitor();
  monitor.HeadStalled(19.0);
  monitor.Failure("b", "rank 1 exited with signal 15 (Terminated)", 128 + SIGTERM);
  monitor.AgentLost("a", "lost its agent at 127.0.0.1:1 during the job: recvmsg:Connection reset by peer");
  EXPECT_EQ(monitor.RootCause().rfind("the head (this poplar launch) was stalled for 19 s (suspended", 0), 0u)
      << monitor.RootCause();
}

// A failure of the job's own that came after a stall (a rank out of memory while the
// head's output was blocked: no connection dropped) stays the cause; the stall is said
// after it, never hiding the failure behind "the head was stalled".
TEST_F(LaunchMonitorTest, AStallIsNotBlamedForAFailureOfTheJobsOwn) {
  LaunchMonitor monitor = Monitor();
  monitor.HeadStalled(61.0);
  monitor.Failure("b", "rank 1 exited with status 1: CUDA out of memory");
  monitor.Stopped("a", "the job failed elsewhere");
  EXPECT_EQ(monitor.RootCause(),
            "node 'b': rank 1 exited with status 1: CUDA out of memory; the head (this poplar launch) had been "
            "stalled for 61 s just before");
}

// The user's stop is what the launch reports ("job J was stopped by the user (Ctrl-C)")
// only when no failure of the job's outranks it; a node named "head" losing its stream is
// not the user's stop.
TEST_F(LaunchMonitorTest, SaysWhenTheUsersStopIsTheCause) {
  LaunchMonitor stopped = Monitor();
  stopped.UserStopped("Ctrl-C");
  stopped.Stopped("a", "the launch was cancelled");
  EXPECT_EQ(stopped.UserStop(), "stopped by the user (Ctrl-C)");
  EXPECT_EQ(stopped.RootCause(), "node 'head': stopped by the user (Ctrl-C)");
  LaunchMonitor failed = Monitor();
  failed.Failure("b", "rank 1 was killed by signal 9 (Killed)");
  failed.UserStopped("Ctrl-C");
  EXPECT_EQ(failed.UserStop(), "");
  LaunchMonitor node_named_head = Monitor();
  node_named_head.Stopped("head", "the launch was cancelled");
  EXPECT_EQ(node_named_head.UserStop(), "");
}

// Taking a node back stops the job (every rank's SIGTERM and the nodes' stops follow):
// that is the attempt's end, unless the job failed on its own meanwhile.
TEST_F(LaunchMonitorTest, TakingANodeBackIsNoFailureOfTheJobs) {
  LaunchMonitor back = Monitor();
  back.TakingBack("node 'b' answers again: taken back after the checkpoint of step 10");
  back.Failure("a", "rank 0 was killed by signal 15 (Terminated)", 128 + 15);
  back.Stopped("a", "stopped by the head node");
  EXPECT_TRUE(back.failed());
  EXPECT_EQ(back.TakeBack(), "node 'b' answers again: taken back after the checkpoint of step 10");
  EXPECT_EQ(back.UserStop(), "");
  LaunchMonitor failed = Monitor();
  failed.TakingBack("node 'b' answers again: taken back after the checkpoint of step 10");
  failed.Failure("a", "rank 0 exited with status 1: out of memory", 1);
  EXPECT_EQ(failed.TakeBack(), "");
  EXPECT_EQ(failed.RootCause(), "node 'a': rank 0 exited with status 1: out of memory");
}

// A failed job's message says where its checkpoints are only when one was due (or it
// resumed from one), not "checkpoints stay in ..." after a failure at step 2.
TEST_F(LaunchMonitorTest, SaysWhetherAFailedJobLeftCheckpoints) {
  LaunchMonitor early = Monitor();
  const std::string none = "no checkpoint was due by step 0, the last the head heard of (the first is due at step 5)";
  EXPECT_EQ(early.CheckpointsKept(5, "D"), none);
  early.Metrics(0, Record(1, 0, 5.0, 0.2, 0.1));
  early.Metrics(0, Record(4, 0, 5.0, 0.2, 0.1));
  EXPECT_EQ(early.CheckpointsKept(5, "D"),
            "no checkpoint was due by step 4, the last the head heard of (the first is due at step 5)");
  EXPECT_EQ(early.CheckpointsKept(0, "D"),
            "no checkpoint was due (job.checkpoint_every is 0: only the end writes one)");
  early.Metrics(0, Record(5, 0, 5.0, 0.2, 0.1));
  EXPECT_EQ(early.CheckpointsKept(5, "D"), "the checkpoints rank 0's node completed (every 5 steps) stay in D");
  LaunchMonitor resumed = Monitor();
  resumed.Metrics(0, Record(8, 0, 4.0, 0.2, 0.1));  // went on from step 7's checkpoint
  EXPECT_EQ(resumed.CheckpointsKept(0, "D"), "the checkpoints rank 0's node completed stay in D");
  // A resume that failed before its first step still has the checkpoints it meant to
  // go on from.
  LaunchMonitor failed_resume = Monitor();
  failed_resume.ExpectResume("rr");
  EXPECT_EQ(failed_resume.CheckpointsKept(5, "D"), "the checkpoints rank 0's node completed (every 5 steps) stay in D");
  // A job of 10 steps checkpointing every 20 has its first (and only) at its end.
  LaunchMonitor short_job = Monitor();
  short_job.Metrics(0, Record(1, 0, 5.0, 0.2, 0.1));
  short_job.Metrics(0, Record(4, 0, 5.0, 0.2, 0.1));
  EXPECT_EQ(short_job.CheckpointsKept(20, "D"),
            "no checkpoint was due by step 4, the last the head heard of (the first is due at step 10)");
  short_job.Metrics(0, Record(10, 0, 5.0, 0.2, 0.1));
  EXPECT_EQ(short_job.CheckpointsKept(20, "D"), "the checkpoints rank 0's node completed (every 20 steps) stay in D");
  EXPECT_EQ(short_job.CheckpointsKept(1, "D"), "the checkpoints rank 0's node completed (every step) stay in D");
}

// A plan handed to rank 0 is kept in the run directory; it takes over at the step whose
// record names it, which is said with its prediction and reason, recorded in
// plan_switches.json, and the summary then measures the steps it trained against its
// prediction.
TEST_F(LaunchMonitorTest, APlanSwitchIsReportedWhereItTakesOver) {
  LaunchMonitor monitor = Monitor(/*progress_every=*/0);
  monitor.StartingPlan(0.4);
  const auto record = [](std::int64_t step, int plan, double step_s) {
    auto value = nlohmann::json::parse(Record(step, 0, 4.0, step_s, 0.1));
    value["plan"] = plan;
    return value;
  };
  for (int step = 1; step <= 3; ++step) monitor.Metrics(0, record(step, 0, 0.5).dump());
  monitor.PlanSwitch(R"({"number": 1, "reason": "rank 1 runs slower than profiled",)"
                     R"( "plan": {"stage": 0, "predicted": {"step_s": 0.2}}})");
  EXPECT_TRUE(Contains(out_.str(), "plan 1 handed to rank 0: rank 1 runs slower than profiled")) << out_.str();
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/plans/plan-1.json"));
  auto fourth = record(4, 0, 0.5);
  fourth["next_plan"] = 1;
  fourth["switch_s"] = 0.003;
  monitor.Metrics(0, fourth.dump());
  EXPECT_FALSE(Contains(out_.str(), "trains from here"));
  for (int step = 5; step <= 10; ++step) monitor.Metrics(0, record(step, 1, 0.25).dump());
  EXPECT_TRUE(Contains(out_.str(),
                       "step 5: plan 1 trains from here, predicted 200.0 ms per step (was 400.0 ms): "
                       "rank 1 runs slower than profiled"))
      << out_.str();
  const auto summary = monitor.Summary();
  EXPECT_DOUBLE_EQ(summary["measured_step_s"].get<double>(), 0.25);  // plan 1's steps alone
  EXPECT_DOUBLE_EQ(summary["predicted_step_s"].get<double>(), 0.2);
  EXPECT_EQ(summary["plan"], 1);
  ASSERT_EQ(summary["plan_switches"].size(), 1u);
  EXPECT_EQ(summary["plan_switches"][0]["from_step"], 5);
  EXPECT_DOUBLE_EQ(summary["plan_switches"][0]["switch_s"].get<double>(), 0.003);
  const auto recorded = nlohmann::ordered_json::parse(ReadTextFile(dir_.path() + "/plan_switches.json"));
  EXPECT_EQ(recorded, summary["plan_switches"]);
}

}  // namespace
}  // namespace poplar
