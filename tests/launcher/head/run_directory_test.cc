// The run directory of `poplar launch` (launcher/head/run_directory.h): which job it holds,
// and that a resume keeps what the attempts before it wrote.
#include "launcher/head/run_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "test_support.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;
using poplar::testing::ContainsAll;
using poplar::testing::ScratchDir;

// A finished first attempt of job j1 in scratch/run: its plan, summary and profile.
// Returns the run directory's path.
std::string WriteFirstAttempt(const ScratchDir& scratch) {
  scratch.Write("run/plan.json", "plan 1");
  scratch.Write("run/summary.json", "{\"job_id\": \"j1\", \"ok\": true}");
  scratch.Write("run/profiles/fast.json", "profile 1");
  return scratch.path() + "/run";
}

// The InputError opening `path` throws; fails the test if none.
InputError OpenError(const std::string& path, const std::string& job_id, bool resume) {
  try {
    RunDirectory directory(path, job_id, resume);
    ADD_FAILURE() << "opened without error";
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

TEST(RunDirectory, ALaunchRefusedBeforeKeepLeavesNothingBehind) {
  ScratchDir scratch("run-dir");
  const std::string path = scratch.path() + "/runs/j1";
  { RunDirectory directory(path, "j1", false); }
  EXPECT_FALSE(fs::exists(scratch.path() + "/runs"));
  {
    RunDirectory directory(path, "j1", false);
    directory.Keep();
  }
  EXPECT_EQ(ReadTextFile(path + "/job_id"), "j1\n");
}

TEST(RunDirectory, RefusesADirectoryHoldingARunUnlessResuming) {
  ScratchDir scratch("run-dir");
  scratch.Write("old/job_id", "j1\n");
  const InputError error = OpenError(scratch.path() + "/old", "j1", false);
  EXPECT_EQ(error.file(), "--run-dir");
  EXPECT_TRUE(ContainsAll(error.reason(), {"already holds a run", "--resume"})) << error.reason();
  RunDirectory resumed(scratch.path() + "/old", "j1", true);
}

// The folder `poplar plan` wrote (plan.json, profiles/ beside it) is no run directory:
// given as --run-dir, a launch would write over the plan and a resume would move both
// into attempts/1. Refused either way, untouched.
TEST(RunDirectory, RefusesAFolderThatPoplarPlanWrote) {
  ScratchDir scratch("run-dir");
  scratch.Write("planned/plan.json", "plan");
  scratch.Write("planned/profiles/fast.json", "profile");
  for (const bool resume : {false, true}) {
    const InputError error = OpenError(scratch.path() + "/planned", "j1", resume);
    EXPECT_EQ(error.file(), "--run-dir");
    EXPECT_TRUE(ContainsAll(error.reason(),
                            {"holds plan.json and profiles/ but no run of poplar launch", "choose another --run-dir"}))
        << error.reason();
  }
  EXPECT_EQ(ReadTextFile(scratch.path() + "/planned/plan.json"), "plan");
  EXPECT_EQ(ReadTextFile(scratch.path() + "/planned/profiles/fast.json"), "profile");
  EXPECT_FALSE(fs::exists(scratch.path() + "/planned/attempts"));
  EXPECT_FALSE(fs::exists(scratch.path() + "/planned/job_id"));
  // A run of a head from before the job_id file that died before its summary: its logs
  // say it is a run, which --resume goes on in.
  scratch.Write("old-run/plan.json", "plan");
  scratch.Write("old-run/logs/rank-0.log", "log");
  EXPECT_TRUE(ContainsAll(OpenError(scratch.path() + "/old-run", "j1", false).reason(), {"already holds a run"}));
  RunDirectory resumed(scratch.path() + "/old-run", "j1", true);
}

TEST(RunDirectory, RefusesToResumeAnotherJobsRun) {
  ScratchDir scratch("run-dir");
  scratch.Write("mine/job_id", "j1\n");
  scratch.Write("mine/summary.json", "{\"job_id\": \"j1\", \"ok\": true}\n");
  const InputError error = OpenError(scratch.path() + "/mine", "j2", true);
  EXPECT_EQ(error.file(), "--run-dir");
  EXPECT_TRUE(ContainsAll(error.reason(), {"job 'j1'", "not of job 'j2'"})) << error.reason();
  // A directory from before the job_id file: its summary says whose it is.
  scratch.Write("older/plan.json", "{}");
  scratch.Write("older/summary.json", "{\"job_id\": \"j1\", \"ok\": true}\n");
  EXPECT_TRUE(ContainsAll(OpenError(scratch.path() + "/older", "j2", true).reason(), {"job 'j1'"}));
  EXPECT_EQ(ReadTextFile(scratch.path() + "/mine/summary.json"), "{\"job_id\": \"j1\", \"ok\": true}\n");
}

TEST(RunDirectory, AResumeKeepsEachEarlierAttemptsPlanProfilesAndSummary) {
  ScratchDir scratch("run-dir");
  const std::string path = WriteFirstAttempt(scratch);
  scratch.Write("run/job_id", "j1\n");
  scratch.Write("run/logs/rank-0.log", "log");
  RunDirectory first(path, "j1", true);
  EXPECT_EQ(first.KeepPreviousAttempt(), path + "/attempts/1");
  first.Keep();
  EXPECT_EQ(ReadTextFile(path + "/attempts/1/plan.json"), "plan 1");
  EXPECT_EQ(ReadTextFile(path + "/attempts/1/summary.json"), "{\"job_id\": \"j1\", \"ok\": true}");
  EXPECT_EQ(ReadTextFile(path + "/attempts/1/profiles/fast.json"), "profile 1");
  EXPECT_FALSE(fs::exists(path + "/plan.json"));
  EXPECT_EQ(ReadTextFile(path + "/logs/rank-0.log"), "log") << "logs stay, to be appended to";

  // The second resume of a failed first one: a plan but no summary.
  scratch.Write("run/plan.json", "plan 2");
  RunDirectory second(path, "j1", true);
  EXPECT_EQ(second.KeepPreviousAttempt(), path + "/attempts/2");
  EXPECT_EQ(ReadTextFile(path + "/attempts/2/plan.json"), "plan 2");
  EXPECT_EQ(ReadTextFile(path + "/attempts/1/plan.json"), "plan 1");
  // Nothing written since: nothing to keep.
  EXPECT_EQ(second.KeepPreviousAttempt(), "");
  EXPECT_FALSE(fs::exists(path + "/attempts/3"));
  second.Keep();
}

// A resume refused after the previous attempt's files moved (an agent unreachable, no
// feasible plan) puts them back: the directory is as it was.
TEST(RunDirectory, AResumeRefusedBeforeItStartsPutsThePreviousAttemptBack) {
  ScratchDir scratch("run-dir");
  const std::string path = WriteFirstAttempt(scratch);
  {
    RunDirectory refused(path, "j1", true);
    ASSERT_EQ(refused.KeepPreviousAttempt(), path + "/attempts/1");
    scratch.Write("run/profiles/fast.json", "profile of the refused attempt");
  }
  EXPECT_EQ(ReadTextFile(path + "/plan.json"), "plan 1");
  EXPECT_EQ(ReadTextFile(path + "/summary.json"), "{\"job_id\": \"j1\", \"ok\": true}");
  EXPECT_EQ(ReadTextFile(path + "/profiles/fast.json"), "profile 1");
  EXPECT_FALSE(fs::exists(path + "/attempts")) << "no empty attempt is left";
}

// A first launch into a folder that exists, refused by every agent: what it wrote goes
// (plan.json, the monitor's empty logs/ and metrics/), what was there stays.
TEST(RunDirectory, ALaunchRefusedInAFolderThatExistedRemovesOnlyWhatItWrote) {
  ScratchDir scratch("run-dir");
  const std::string path = scratch.path() + "/run";
  scratch.Write("run/notes.txt", "mine");
  {
    RunDirectory refused(path, "j1", false);
    scratch.Write("run/plan.json", "plan");
    fs::create_directories(path + "/logs");
    fs::create_directories(path + "/metrics");
  }
  EXPECT_EQ(ReadTextFile(path + "/notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(path + "/plan.json"));
  EXPECT_FALSE(fs::exists(path + "/logs"));
  EXPECT_FALSE(fs::exists(path + "/metrics"));
  EXPECT_FALSE(fs::exists(path + "/job_id"));
}

// The job id is on the disk before the launch writes anything there (profiles, the plan,
// the workers' logs), so that a head killed then (a second Ctrl-C) leaves no directory
// that another job could resume into. A launch refused after Record (every agent refused)
// still removes it.
TEST(RunDirectory, RecordsTheJobBeforeTheLaunchWritesInIt) {
  ScratchDir scratch("run-dir");
  const std::string path = scratch.path() + "/run";
  scratch.Write("run/notes.txt", "mine");
  {
    RunDirectory refused(path, "j1", false);
    refused.Record();
    EXPECT_EQ(ReadTextFile(path + "/job_id"), "j1\n");
  }
  EXPECT_FALSE(fs::exists(path + "/job_id"));
  {
    RunDirectory died(path, "j1", false);
    died.Record();
    died.Keep();  // as if the head died here: the file stays
  }
  EXPECT_TRUE(ContainsAll(OpenError(path, "j2", true).what(), {"holds the run of job 'j1'"}));
}

// A head killed while writing summary.json leaves summary.json.tmp.PID; the next launch
// there removes it (its writer is gone), and leaves a live writer's, and files that are
// not the head's, alone.
TEST(RunDirectory, RemovesTheTemporariesOfHeadsThatDied) {
  ScratchDir scratch("run-dir");
  const std::string path = scratch.path() + "/run";
  scratch.Write("run/job_id", "j1\n");
  scratch.Write("run/summary.json.tmp.999999999", "half");     // above pid_max: no such process
  scratch.Write("run/model.bin.tmp.999999999", "the user's");  // not the head's: left alone
  const std::string live = "run/summary.json.tmp." + std::to_string(::getpid());
  scratch.Write(live, "being written");
  RunDirectory resumed(path, "j1", true);
  EXPECT_FALSE(fs::exists(path + "/summary.json.tmp.999999999"));
  EXPECT_TRUE(fs::exists(path + "/model.bin.tmp.999999999"));
  EXPECT_TRUE(fs::exists(scratch.path() + "/" + live));
}

}  // namespace
}  // namespace poplar
