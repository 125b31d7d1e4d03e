// Checkpoints resume on another plan and another number of ranks with the same result
// as the uninterrupted run (docs/worker.md, checkpoints).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "launcher/worker/checkpoint.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

std::vector<std::string> Args(const ScratchDir& scratch, const std::string& plan, int steps,
                              std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--lr", "1e-3", "--timeout", "60"});
  return TrainCommand(scratch, plan, steps, extra);
}

// A slow disk for the workers started while it lives (slow_fsync.cc, by LD_PRELOAD, which
// the test process itself never loads): every fsync first sleeps `delay_ms`.
class SlowDisk {
 public:
  explicit SlowDisk(int delay_ms) {
    ::setenv("LD_PRELOAD", SLOW_FSYNC_LIBRARY, 1);
    ::setenv("POPLAR_TEST_FSYNC_DELAY_MS", std::to_string(delay_ms).c_str(), 1);
  }
  ~SlowDisk() {
    ::unsetenv("LD_PRELOAD");
    ::unsetenv("POPLAR_TEST_FSYNC_DELAY_MS");
  }
  SlowDisk(const SlowDisk&) = delete;
  SlowDisk& operator=(const SlowDisk&) = delete;
};

// Every test's scratch folder, with the tiny model and 6000 tokens.
class Resume : public ::testing::Test {
 protected:
  Resume() {
    WriteModelConfig(scratch);
    WriteTokens(scratch, 6000);
  }
  ScratchDir scratch{"poplar_resume"};
};

// Trains 4 steps on 2 ranks at stage 1, and again 2 steps there and 2 resumed on 3 ranks
// at stage 3 (each with its state shares, when given): the largest difference between
// the two runs' saved parameters.
double ResumedOnAnotherPlanAndRankCount(const ScratchDir& scratch, const std::vector<double>& two_shares = {},
                                        const std::vector<double>& three_shares = {}) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{5, 3}, {4, 2}}, two_shares);
  const std::string three = WritePlan(scratch, "three.json", 3, {{4, 0, 3}, {2, 2, 0}, {1, 1, 1}}, three_shares);

  const JobOutcome whole = RunJob(scratch, 2, Args(scratch, two, 4, {"--save", "whole.pt"}));
  EXPECT_TRUE(whole.AllSucceeded()) << whole.Describe();

  const std::string checkpoints = scratch.path() + "/checkpoints";
  const JobOutcome first =
      RunJob(scratch, 2, Args(scratch, two, 2, {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1"}));
  EXPECT_TRUE(first.AllSucceeded()) << first.Describe();
  // Only the last step's checkpoint is certain: step 1's, still waiting to be written when
  // step 2's came, may have been dropped for it (by design, on a busy machine).
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000002\n");

  const JobOutcome second =
      RunJob(scratch, 3, Args(scratch, three, 4, {"--resume", checkpoints, "--save", "resumed.pt"}));
  EXPECT_TRUE(second.AllSucceeded()) << second.Describe();
  if (!(whole.AllSucceeded() && first.AllSucceeded() && second.AllSucceeded())) return 1e30;
  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt"));
  std::cout << "[ resume 2 ranks stage 1 -> 3 ranks stage 3 ] max |difference| = " << difference << "\n";
  return difference;
}

TEST_F(Resume, OnAnotherPlanAndRankCountEqualsTheUninterruptedRun) {
  EXPECT_LT(ResumedOnAnotherPlanAndRankCount(scratch), 1e-5);
}

// Checkpoints are whole, whatever the split: a run with uneven shares resumes on another.
TEST_F(Resume, FromOneStateSplitOnAnotherEqualsTheUninterruptedRun) {
  EXPECT_LT(ResumedOnAnotherPlanAndRankCount(scratch, {1, 3}, {0, 2, 1}), 1e-5);
}

TEST_F(Resume, ALlamaOnAnotherPlanAndRankCountEqualsTheUninterruptedRun) {
  WriteLlamaConfig(scratch);
  EXPECT_LT(ResumedOnAnotherPlanAndRankCount(scratch), 1e-5);
}

// A checkpoint records how it was trained (meta.json "training"), and a resume that goes
// on otherwise says so on the rank that read it, naming each setting and the next
// step's rates; one that goes on the same way says nothing, and a checkpoint that
// records no recipe is refused.
TEST_F(Resume, AResumeThatChangesTheTrainingSaysWhat) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{5, 3}, {4, 2}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const std::vector<std::string> schedule = {"--warmup-steps", "2", "--lr-decay", "cosine", "--decay-steps", "4"};
  std::vector<std::string> first = schedule;
  first.insert(first.end(), {"--checkpoint-dir", checkpoints});
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 2, first)).AllSucceeded());
  const nlohmann::json meta = nlohmann::json::parse(ReadWholeFile(checkpoints + "/step-00000002/meta.json"));
  EXPECT_EQ(meta["training"]["lr"], 1e-3);
  EXPECT_EQ(meta["training"]["lr_decay"], "cosine");
  EXPECT_EQ(meta["training"]["decay_steps"], 4);
  EXPECT_EQ(meta["training"]["global_batch"], 14);
  EXPECT_EQ(meta["training"]["data_tokens"], 6000);

  std::vector<std::string> same = schedule;
  same.insert(same.end(), {"--resume", checkpoints});
  const JobOutcome unchanged = RunJob(scratch, 2, Args(scratch, two, 4, same));
  ASSERT_TRUE(unchanged.AllSucceeded()) << unchanged.Describe();
  EXPECT_FALSE(Contains(unchanged.errors[0] + unchanged.errors[1], "warning")) << unchanged.Describe();

  std::vector<std::string> lower = Args(scratch, two, 4, same);
  *(std::find(lower.begin(), lower.end(), "--lr") + 1) = "5e-4";
  const JobOutcome changed = RunJob(scratch, 2, lower);
  ASSERT_TRUE(changed.AllSucceeded()) << changed.Describe();
  EXPECT_TRUE(ContainsAll(
      changed.errors[0],
      {"poplar-worker[rank 0]: warning: --resume " + checkpoints, "goes on from step 2", "lr: 0.001 then, 0.0005 now",
       "min_lr: 0.0001 then, 5e-05 now", "the learning rate of step 3: 0.001 on the schedule then, 0.0005 now"}))
      << changed.errors[0];
  EXPECT_FALSE(Contains(changed.errors[1], "warning")) << changed.errors[1];

  // A meta.json without the recipe is no checkpoint poplar writes: named, not resumed.
  nlohmann::json unrecorded = meta;
  unrecorded.erase("training");
  scratch.Write("checkpoints/step-00000002/meta.json", unrecorded.dump(2));
  const JobOutcome refused = RunJob(scratch, 2, lower);
  EXPECT_FALSE(refused.AllSucceeded());
  EXPECT_TRUE(ContainsAll(refused.errors[0], {"step-00000002/meta.json", "training"})) << refused.errors[0];
}

// As across nodes that share no file system: only rank 0 is given the checkpoint, and
// the other ranks receive its state over the collectives.
TEST_F(Resume, NeedsTheCheckpointOnRankZeroOnly) {
  const std::string two = WritePlan(scratch, "two.json", 2, {{5, 3}, {4, 2}});
  const std::string three = WritePlan(scratch, "three.json", 1, {{4, 3}, {2, 2}, {1, 2}});
  const std::string checkpoints = scratch.path() + "/checkpoints";

  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 4, {"--save", "whole.pt"})).AllSucceeded());
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  const std::vector<std::string> others =
      Args(scratch, three, 4, {"--metrics", "m{rank}.jsonl", "--save", "resumed.pt"});
  std::vector<std::string> rank0 = others;
  rank0.insert(rank0.end(), {"--resume", checkpoints});
  const JobOutcome resumed = RunJob(scratch, {rank0, others, others});
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();

  const double difference =
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt"));
  std::cout << "[ resume, checkpoint on rank 0 only, 2 ranks stage 2 -> 3 ranks stage 1 ] max |difference| = "
            << difference << "\n";
  EXPECT_LT(difference, 1e-5);
  // Every rank knew it resumed: its metrics start at step 3.
  for (int rank = 0; rank < 3; ++rank) {
    const auto lines = ReadLines(scratch.path() + "/m" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(lines.size(), 2u) << "rank " << rank;
    EXPECT_TRUE(Contains(lines[0], "\"step\":3")) << lines[0];
  }
}

// After a re-plan rank 0 may run on a node without the checkpoints: the rank that has
// them sends the state, with the same result as the uninterrupted run.
TEST_F(Resume, FromACheckpointOnAnotherRankThanZero) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{5, 3}, {4, 2}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 4, {"--save", "whole.pt"})).AllSucceeded());
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());

  const std::vector<std::string> rank0 = Args(scratch, two, 4, {"--metrics", "m{rank}.jsonl", "--save", "resumed.pt"});
  std::vector<std::string> rank1 = rank0;
  rank1.insert(rank1.end(), {"--resume", checkpoints});
  const JobOutcome resumed = RunJob(scratch, {rank0, rank1});
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
  EXPECT_LT(
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt")),
      1e-5);
  const auto lines = ReadLines(scratch.path() + "/m0.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(Contains(lines[0], "\"step\":3")) << lines[0];
}

// Two nodes hold checkpoints of the job, one older (rank 0 wrote it before a re-plan
// moved rank 0 elsewhere): the newest is the one resumed from, whichever rank has it.
TEST_F(Resume, FromTheNewestCheckpointAnyRankHolds) {
  const std::string two = WritePlan(scratch, "two.json", 2, {{5, 3}, {4, 2}});
  const std::string newer = scratch.path() + "/newer";
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 3, {"--checkpoint-dir", newer})).AllSucceeded());
  // Step 1's checkpoint of the same training, made by a run of its own: in the run above
  // it may have given way to step 2's (CheckpointWriter), so it is not copied from there.
  const std::string older = scratch.path() + "/older";
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 1, {"--checkpoint-dir", older})).AllSucceeded());
  ASSERT_EQ(ReadWholeFile(older + "/latest"), "step-00000001\n");

  const std::vector<std::string> common = Args(scratch, two, 5, {"--metrics", "m{rank}.jsonl"});
  std::vector<std::string> rank0 = common;
  rank0.insert(rank0.end(), {"--resume", older});
  std::vector<std::string> rank1 = common;
  rank1.insert(rank1.end(), {"--resume", newer});
  const JobOutcome resumed = RunJob(scratch, {rank0, rank1});
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
  for (int rank = 0; rank < 2; ++rank) {
    const auto lines = ReadLines(scratch.path() + "/m" + std::to_string(rank) + ".jsonl");
    ASSERT_EQ(lines.size(), 2u) << "rank " << rank << " went on from step 3, not 1";
    EXPECT_TRUE(Contains(lines[0], "\"step\":4")) << lines[0];
  }
}

// A checkpoint the resuming rank cannot read fails every rank at once, each saying
// whose it was, instead of leaving the others waiting out --timeout.
TEST_F(Resume, ACheckpointOneRankCannotReadFailsEveryRankSayingWhose) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{2}, {2}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 1, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  scratch.Write("checkpoints/step-00000001/model.pt", "not a state dict");

  std::vector<std::string> rank1 = Args(scratch, two, 2, {});
  rank1.insert(rank1.end(), {"--resume", checkpoints});
  const JobOutcome torn = RunJob(scratch, {Args(scratch, two, 2, {}), rank1});
  EXPECT_FALSE(torn.AllSucceeded());
  EXPECT_TRUE(Contains(torn.errors[0], "rank 1, which holds the newest checkpoint (step 1), cannot read it"))
      << torn.Describe();
  EXPECT_TRUE(Contains(torn.errors[1], "model.pt")) << torn.Describe();

  // A meta.json that does not parse: found before any tensor is sent.
  scratch.Write("checkpoints/step-00000001/meta.json", "{");
  const JobOutcome unreadable = RunJob(scratch, {Args(scratch, two, 2, {}), rank1});
  EXPECT_TRUE(Contains(unreadable.errors[0], "rank 1 cannot read its --resume checkpoint")) << unreadable.Describe();
  EXPECT_TRUE(Contains(unreadable.errors[1], "meta.json")) << unreadable.Describe();
}

// A checkpoint folder whose `latest` leads out of it, or whose step folder disagrees
// with its meta.json, is refused by name rather than followed or trusted.
TEST_F(Resume, RefusesALatestThatLeavesTheFolderAndAStepThatDisagreesWithItsFolder) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());

  // A copy of the checkpoint outside, and `latest` pointing at it.
  std::filesystem::copy(checkpoints + "/step-00000002", scratch.path() + "/outside",
                        std::filesystem::copy_options::recursive);
  scratch.Write("checkpoints/latest", "../outside\n");
  const JobOutcome outside = RunJob(scratch, 1, Args(scratch, one, 3, {"--resume", checkpoints}));
  EXPECT_FALSE(outside.AllSucceeded());
  EXPECT_TRUE(ContainsAll(outside.Describe(), {checkpoints + "/latest", "must name a step folder", "../outside"}))
      << outside.Describe();

  // A step folder renamed: its meta.json still says step 2.
  std::filesystem::rename(checkpoints + "/step-00000002", checkpoints + "/step-00000005");
  scratch.Write("checkpoints/latest", "step-00000005\n");
  const JobOutcome renamed = RunJob(scratch, 1, Args(scratch, one, 6, {"--resume", checkpoints}));
  EXPECT_FALSE(renamed.AllSucceeded());
  EXPECT_TRUE(ContainsAll(renamed.Describe(), {"step-00000005/meta.json: step: is 2", "named for step 5"}))
      << renamed.Describe();

  // A meta.json whose format is not a string is named with its file and key.
  scratch.Write("checkpoints/step-00000005/meta.json", R"({"format": 1, "step": 5, "model": {}})");
  const JobOutcome format = RunJob(scratch, 1, Args(scratch, one, 6, {"--resume", checkpoints}));
  EXPECT_TRUE(ContainsAll(format.Describe(), {"step-00000005/meta.json: format: must be a string"}))
      << format.Describe();

  // `latest` naming no folder, and a folder that is no checkpoint at all, say so.
  scratch.Write("checkpoints/latest", "step-00000099\n");
  const JobOutcome missing = RunJob(scratch, 1, Args(scratch, one, 6, {"--resume", checkpoints}));
  EXPECT_TRUE(ContainsAll(missing.Describe(), {checkpoints + "/latest", "names step-00000099", "not a folder"}))
      << missing.Describe();
  std::filesystem::create_directories(scratch.path() + "/empty");
  const JobOutcome empty = RunJob(scratch, 1, Args(scratch, one, 6, {"--resume", scratch.path() + "/empty"}));
  EXPECT_TRUE(ContainsAll(empty.Describe(), {"/empty", "neither a checkpoint folder", "nor a step folder"}))
      << empty.Describe();
}

// Resuming from an earlier step writes a step folder that exists again: the new one
// takes its place whole (the folders are exchanged), `latest` names it throughout, and
// no temporary or old folder stays behind.
TEST_F(Resume, AStepWrittenAgainReplacesTheOldFolderWhole) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  // Steps 1 and 2 in two runs: in one, with --checkpoint-every 1, step 2's checkpoint may
  // take the place of step 1's still waiting behind a slow disk (a busy machine), and the
  // test needs both.
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 1, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 2, {"--resume", checkpoints, "--checkpoint-dir", checkpoints}))
                  .AllSucceeded());
  const auto written = std::filesystem::last_write_time(checkpoints + "/step-00000002/model.pt");
  // Again from step 1: step 2 is written anew.
  const JobOutcome again = RunJob(
      scratch, 1, Args(scratch, one, 2, {"--resume", checkpoints + "/step-00000001", "--checkpoint-dir", checkpoints}));
  ASSERT_TRUE(again.AllSucceeded()) << again.Describe();
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000002\n");
  EXPECT_NE(std::filesystem::last_write_time(checkpoints + "/step-00000002/model.pt"), written);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".poplar.lock", "latest", "step-00000001", "step-00000002"}));
  const JobOutcome resumed = RunJob(scratch, 1, Args(scratch, one, 3, {"--resume", checkpoints}));
  EXPECT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
}

TEST_F(Resume, FromStageThreeOnOneRank) {
  const std::string two = WritePlan(scratch, "two.json", 3, {{5, 3}, {4, 2}});
  const std::string one = WritePlan(scratch, "one.json", 0, {{7, 7}});
  const std::string checkpoints = scratch.path() + "/checkpoints";

  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 3, {"--save", "whole.pt"})).AllSucceeded());
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  const JobOutcome resumed =
      RunJob(scratch, 1, Args(scratch, one, 3, {"--resume", checkpoints + "/step-00000002", "--save", "resumed.pt"}));
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
  EXPECT_LT(
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt")),
      1e-5);
}

// The rank that reads the checkpoint sends the Adam moments one parameter at a time, each
// straight into the ranks' shards: no rank holds the whole moments (8 bytes a parameter),
// which at stage 3 over 4 ranks are twice its share of all the states. Ranks capped where
// the uninterrupted run fits (80 MB; its step peaks at 68) resume within the cap too.
TEST_F(Resume, FitsWhereTheRunFitsForTheMomentsComeOneParameterAtATime) {
  WriteModelConfig(scratch, 256, 16, 8);
  const std::string four = WritePlan(scratch, "four.json", 3, {{1}, {1}, {1}, {1}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 4, Args(scratch, four, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  // Rank 0 reads the checkpoint (its whole state, in its memory) and is not capped.
  auto per_rank = [&](const std::vector<std::string>& extra) {
    std::vector<std::vector<std::string>> args(4, Args(scratch, four, 3, extra));
    for (int rank = 1; rank < 4; ++rank) args[rank].insert(args[rank].end(), {"--memory-bytes", "80000000"});
    return args;
  };
  const JobOutcome whole = RunJob(scratch, per_rank({"--save", "whole.pt"}));
  ASSERT_TRUE(whole.AllSucceeded()) << whole.Describe();
  const JobOutcome resumed = RunJob(scratch, per_rank({"--resume", checkpoints, "--save", "resumed.pt"}));
  ASSERT_TRUE(resumed.AllSucceeded()) << resumed.Describe();
  EXPECT_LT(
      MaxAbsDifference(ReadStateDict(scratch.path() + "/whole.pt"), ReadStateDict(scratch.path() + "/resumed.pt")),
      1e-5);
}

// Each file of a checkpoint is checked against the model and blamed by name: another
// model's model.pt is named, not optimizer.pt; extra optimizer keys are refused; a pipe
// as `latest` is refused without blocking; a folder in the way of `latest` is found
// before the first checkpoint is written.
TEST_F(Resume, EachCheckpointFileIsCheckedAndBlamedByName) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  const std::string step = checkpoints + "/step-00000002";
  const StateDict model = ReadStateDict(step + "/model.pt");
  const StateDict optimizer = ReadStateDict(step + "/optimizer.pt");
  auto expect_resume_to_say = [&](const std::string& words) {
    const std::string said = RunJob(scratch, 1, Args(scratch, one, 3, {"--resume", checkpoints})).Describe();
    EXPECT_TRUE(Contains(said, words)) << said;
  };

  StateDict other_model = model;
  other_model["transformer.wpe.weight"] = torch::zeros({3, 3});
  WriteStateDict(step + "/model.pt", other_model);
  expect_resume_to_say(step + "/model.pt: transformer.wpe.weight: has shape [3, 3]");
  WriteStateDict(step + "/model.pt", model);

  StateDict extra = optimizer;
  extra["exp_avg.transformer.extra"] = torch::zeros({2});
  WriteStateDict(step + "/optimizer.pt", extra);
  expect_resume_to_say(step + "/optimizer.pt: exp_avg.transformer.extra: is not a moment");
  StateDict reshaped = optimizer;
  reshaped["exp_avg_sq.transformer.wpe.weight"] = torch::zeros({3, 3});
  WriteStateDict(step + "/optimizer.pt", reshaped);
  expect_resume_to_say("optimizer.pt: exp_avg_sq.transformer.wpe.weight: has shape [3, 3], the parameter has");
  WriteStateDict(step + "/optimizer.pt", optimizer);
  expect_resume_to_say("exit 0");

  // meta.json is read as strictly as every other file: no extra key, no key given twice,
  // and a bad step named as such.
  const std::string meta = ReadWholeFile(step + "/meta.json");
  std::string noted = meta;
  noted.insert(noted.find('{') + 1, "\"note\": 1, ");
  scratch.Write("checkpoints/step-00000002/meta.json", noted);
  expect_resume_to_say(step + "/meta.json: note: unknown key");
  std::string quoted = meta;
  quoted.replace(quoted.find("\"step\": 2"), 9, "\"step\": \"2\"");
  scratch.Write("checkpoints/step-00000002/meta.json", quoted);
  expect_resume_to_say(step + "/meta.json: step: must be an integer, got the string \"2\"");
  nlohmann::json later = nlohmann::json::parse(meta);  // a line that goes on after the checkpoint
  later["line"] = nlohmann::json::parse(R"([{"run": "00000000000000aa", "step": 3}])");
  scratch.Write("checkpoints/step-00000002/meta.json", later.dump(2));
  expect_resume_to_say(step + "/meta.json: line: goes on from step 3, after this checkpoint's step 2");
  scratch.Write("checkpoints/step-00000002/meta.json", meta);

  // A NUL in `latest` is shown as the end of what was read, not passed to the terminal.
  scratch.Write("checkpoints/latest", std::string("step-00000002\0junk\n", 19));
  expect_resume_to_say("must name a step folder beside it (step-NNNNNNNN), got 'step-00000002...'");
  scratch.Write("checkpoints/latest", "step-00000002\n");

  std::filesystem::remove(checkpoints + "/latest");
  ASSERT_EQ(::mkfifo((checkpoints + "/latest").c_str(), 0600), 0);
  expect_resume_to_say(checkpoints + "/latest: is not a regular file");

  std::filesystem::remove(checkpoints + "/latest");
  std::filesystem::create_directories(checkpoints + "/latest");
  const JobOutcome in_the_way = RunJob(
      scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints, "--metrics", scratch.path() + "/m.jsonl"}));
  EXPECT_TRUE(Contains(in_the_way.Describe(), checkpoints + "/latest: is not a regular file, so no checkpoint could"))
      << in_the_way.Describe();
  EXPECT_FALSE(std::filesystem::exists(scratch.path() + "/m.jsonl")) << "refused before training, not at the end";
}

// Temporaries a killed writer left in the checkpoint folder are removed when the next
// job starts; those of a writer still running are not.
TEST_F(Resume, TemporariesOfWritersNoLongerRunningAreRemoved) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const std::string alive = std::to_string(::getpid());
  const std::string dead = "999999999";  // above any pid_max (2^22)
  for (const std::string& name : {".step-00000001.tmp" + dead + "/model.pt", ".step-00000001.old" + dead + "/meta.json",
                                  "latest.tmp." + dead, ".step-00000001.tmp" + alive + "/model.pt"}) {
    scratch.Write("checkpoints/" + name, "left behind");
  }
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 1, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".poplar.lock", ".step-00000001.tmp" + alive, "latest", "step-00000001"}));
}

// Two runs on one --checkpoint-dir would overwrite each other's step folders and
// `latest`: the second is refused before it trains, naming the first, and the folder is
// free again once the first has ended, however it ended.
TEST_F(Resume, ASecondRunOnOneCheckpointFolderIsRefused) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  auto first = StartJob(
      scratch, {Args(scratch, one, 1000000,
                     {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1", "--keep-checkpoints", "2"})});
  for (int i = 0; i < 1200 && !std::filesystem::exists(checkpoints + "/latest"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::filesystem::exists(checkpoints + "/latest")) << ReadWholeFile(scratch.path() + "/rank0.err");
  const JobOutcome second = RunJob(scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints}));
  EXPECT_EQ(second.exit_codes[0], 1) << second.Describe();
  EXPECT_TRUE(
      ContainsAll(second.errors[0], {"--checkpoint-dir", checkpoints + " is being written by another run (pid " +
                                                             std::to_string(first[0]->pid()) + ")"}))
      << second.errors[0];
  first[0]->Signal(SIGKILL);
  first[0]->Wait(std::chrono::seconds(60));
  const JobOutcome third = RunJob(scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints}));
  EXPECT_TRUE(third.AllSucceeded()) << third.Describe();
}

// A disk slower than --timeout does not end the job: rank 0 writes its checkpoints in
// the background, so no rank waits for the disk in a collective, and a checkpoint due
// while another is written replaces the waiting one. Every fsync sleeps 700 ms
// here: a checkpoint flushes 7 times, 4.9 s against a --timeout of 3.
TEST_F(Resume, CheckpointsSlowerThanTheTimeoutDoNotStopTheJob) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{4}, {4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  std::vector<std::string> args =
      Args(scratch, two, 4, {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1", "--save", "whole.pt"});
  *(std::find(args.begin(), args.end(), "--timeout") + 1) = "3";
  const JobOutcome job = [&] {
    const SlowDisk slow_disk(700);
    return RunJob(scratch, 2, args);
  }();
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000004\n");
  EXPECT_TRUE(Contains(job.errors[0], "the checkpoint of step 3 was not written: the one of step 4 came"))
      << job.errors[0];
  // The last checkpoint is the trained model, written whole.
  EXPECT_EQ(MaxAbsDifference(ReadStateDict(checkpoints + "/step-00000004/model.pt"),
                             ReadStateDict(scratch.path() + "/whole.pt")),
            0.0);
}

// The step of the checkpoint being written into `dir` (its temporary folder,
// .step-N.tmpPID), waiting up to 60 s for one; 0 if none came.
std::int64_t StepBeingWritten(const std::string& dir) {
  for (int i = 0; i < 1200; ++i) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename();
      if (name.rfind(".step-", 0) == 0 && name.find(".tmp") != std::string::npos) return std::stoll(name.substr(6, 8));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

// A stop (SIGTERM, as from the agent or a scheduler's preemption) that comes while
// rank 0 writes a checkpoint lets the checkpoint finish, trains no further step, and
// then ends the rank by SIGTERM. Every fsync sleeps 300 ms here: a checkpoint takes
// about 2 s.
TEST_F(Resume, AStopWaitsForTheCheckpointInFlight) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  auto job = [&] {
    const SlowDisk slow_disk(300);
    return StartJob(scratch,
                    {Args(scratch, one, 1000000,
                          {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1", "--metrics", "m.jsonl"})});
  }();
  const std::int64_t writing = StepBeingWritten(checkpoints);
  ASSERT_GT(writing, 0) << ReadWholeFile(scratch.path() + "/rank0.err");
  // Twice at once, as when the agent and a scheduler both send it: still one stop.
  job[0]->Signal(SIGTERM);
  job[0]->Signal(SIGTERM);
  EXPECT_EQ(job[0]->Wait(std::chrono::seconds(60)), 128 + SIGTERM);
  const std::string err = ReadWholeFile(scratch.path() + "/rank0.err");
  EXPECT_TRUE(Contains(err, "stopping once the checkpoint in flight is on the disk")) << err;
  const std::string latest = ReadWholeFile(checkpoints + "/latest");
  ASSERT_EQ(latest.size(), 14u) << latest;
  const std::int64_t latest_step = std::stoll(latest.substr(5, 8));
  EXPECT_GE(latest_step, writing) << "the checkpoint being written when the stop came was lost";
  EXPECT_TRUE(std::filesystem::exists(checkpoints + "/" + StepFolderName(latest_step) + "/optimizer.pt"));
  // No further step: the last trained is the one in progress when the newest checkpoint
  // was taken, at most.
  const std::vector<std::string> lines = ReadLines(scratch.path() + "/m.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_LE(nlohmann::json::parse(lines.back()).at("step").get<std::int64_t>(), latest_step + 1) << lines.back();
}

// A checkpoint's copies, alive while a slow disk takes its time, are the host's memory,
// not the device's: the steps trained meanwhile peak where they do without checkpoints
// (an emulated device counted them, and a plan that filled it ran out of memory).
TEST_F(Resume, ACheckpointBeingWrittenTakesNoneOfTheDevicesMemory) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 4, {"--metrics", "plain.jsonl"})).AllSucceeded());
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const JobOutcome job = [&] {
    const SlowDisk slow_disk(300);
    return RunJob(scratch, 1,
                  Args(scratch, one, 4,
                       {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1", "--metrics", "writing.jsonl"}));
  }();
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();
  const std::vector<std::string> plain = ReadLines(scratch.path() + "/plain.jsonl");
  const std::vector<std::string> writing = ReadLines(scratch.path() + "/writing.jsonl");
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_EQ(writing.size(), 4u);
  for (std::size_t i = 1; i < 4; ++i) {
    const auto without = nlohmann::json::parse(plain[i]).at("peak_bytes").get<std::int64_t>();
    const auto with = nlohmann::json::parse(writing[i]).at("peak_bytes").get<std::int64_t>();
    EXPECT_NEAR(with, without, 4096) << "step " << i + 1;
  }
}

// A second stop (a second or more after the first) does not wait: it ends the rank at
// once, the checkpoint being written left as a temporary (the next run removes it) and
// `latest` on the one before.
TEST_F(Resume, ASecondStopEndsTheRankAtOnce) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  auto job = [&] {
    const SlowDisk slow_disk(3000);  // a checkpoint takes 21 s
    return StartJob(scratch,
                    {Args(scratch, one, 1000000, {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1"})});
  }();
  const std::int64_t writing = StepBeingWritten(checkpoints);
  ASSERT_GT(writing, 0) << ReadWholeFile(scratch.path() + "/rank0.err");
  job[0]->Signal(SIGTERM);
  for (int i = 0; i < 600 && !Contains(ReadWholeFile(scratch.path() + "/rank0.err"), "stopping once"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(Contains(ReadWholeFile(scratch.path() + "/rank0.err"), "stopping once"))
      << "the first stop did not wait for the checkpoint";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // a second stop, not the first one twice
  job[0]->Signal(SIGTERM);
  EXPECT_EQ(job[0]->Wait(std::chrono::seconds(60)), 128 + SIGTERM);
  EXPECT_FALSE(std::filesystem::exists(checkpoints + "/" + StepFolderName(writing)))
      << "the second stop waited for the checkpoint";
}

// --keep-checkpoints N keeps the N newest step folders, `latest` naming the newest; the
// job resumes from it.
TEST_F(Resume, KeepsTheNewestCheckpointsOnly) {
  const std::string one = WritePlan(scratch, "one.json", 1, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 1,
                     Args(scratch, one, 5,
                          {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1", "--keep-checkpoints", "2"}))
                  .AllSucceeded());
  std::vector<std::string> steps;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
    const std::string name = entry.path().filename();
    if (name.rfind("step-", 0) == 0) steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps.back(), "step-00000005");
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000005\n");
  EXPECT_TRUE(RunJob(scratch, 1, Args(scratch, one, 6, {"--resume", checkpoints})).AllSucceeded());
}

// Resumed from an earlier step into the same folder, a run prunes among its own
// checkpoints (up to `latest`) and leaves the abandoned run's later ones, which it
// replaces as it reaches their steps. (Counting those, --keep-checkpoints 2 would leave
// the new run only its newest.)
TEST_F(Resume, PrunesItsOwnCheckpointsNotThoseOfARunItWentBackFrom) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  // A run's last checkpoint is always written (a waiting one may be replaced by the
  // next): steps 2 and 5 are on the disk, step 1 may be. The abandoned run writes step 5
  // alone, so that none of its checkpoints lies among the steps the next run may skip.
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1"}))
                  .AllSucceeded());
  ASSERT_TRUE(RunJob(scratch, 1,
                     Args(scratch, one, 5,
                          {"--resume", checkpoints, "--checkpoint-dir", checkpoints, "--checkpoint-every", "5"}))
                  .AllSucceeded());
  const JobOutcome again = RunJob(scratch, 1,
                                  Args(scratch, one, 4,
                                       {"--resume", checkpoints + "/step-00000002", "--checkpoint-dir", checkpoints,
                                        "--checkpoint-every", "1", "--keep-checkpoints", "2"}));
  ASSERT_TRUE(again.AllSucceeded()) << again.Describe();
  std::vector<std::string> up_to_latest;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
    const std::string name = entry.path().filename();
    if (name.rfind("step-", 0) == 0 && name <= "step-00000004") up_to_latest.push_back(name);
  }
  std::sort(up_to_latest.begin(), up_to_latest.end());
  ASSERT_EQ(up_to_latest.size(), 2u) << "the two newest of this run";
  EXPECT_EQ(up_to_latest.back(), "step-00000004");
  EXPECT_TRUE(std::filesystem::exists(checkpoints + "/step-00000005")) << "the abandoned run's was removed";
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000004\n");
}

// The step folders in `dir`, by step.
std::vector<std::string> StepFolders(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename();
    if (name.rfind("step-", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The same when the new run checkpoints at other steps than the abandoned one: the
// abandoned run's folders below `latest` are not counted either. (Counted, a run resumed
// from step 4 with --checkpoint-every 3 kept 7 and the abandoned 6, and removed 4: one
// checkpoint of its own where it asked for two.) The same for folders that record no
// run (written before checkpoints recorded lines): those up to the resume step count.
TEST_F(Resume, PruningCountsOnlyTheCheckpointsOfItsOwnLine) {
  const ModelConfig config{Architecture::kGpt, 2, 2, 32, 256, 16};
  for (const std::uint64_t abandoned : {std::uint64_t{0x11}, std::uint64_t{0}}) {  // 0: records no run
    SCOPED_TRACE("abandoned run " + std::to_string(abandoned));
    const std::string checkpoints = scratch.path() + "/checkpoints" + std::to_string(abandoned);
    const auto write = [&](std::int64_t step, const CheckpointLine& line) {
      WriteCheckpoint(checkpoints, {step, {{"w", torch::ones({3})}}, {}, std::nullopt, std::nullopt}, config,
                      TrainingRecipe{}, line);
    };
    const CheckpointLine first{abandoned, {}};
    for (std::int64_t step : {2, 4, 6, 8, 10}) write(step, first);  // the abandoned run, every 2 steps
    const CheckpointLine line = first.ContinuedBy(0x22, 4);         // resumed from step 4, every 3
    const auto write_own = [&](std::int64_t step) {
      write(step, line);
      PruneCheckpoints(checkpoints, 2, line);
    };
    write_own(7);
    EXPECT_EQ(StepFolders(checkpoints), (std::vector<std::string>{"step-00000004", "step-00000006", "step-00000007",
                                                                  "step-00000008", "step-00000010"}));
    write_own(10);  // replaces the abandoned run's 10
    EXPECT_EQ(StepFolders(checkpoints), (std::vector<std::string>{"step-00000007", "step-00000008", "step-00000010"}));
    write_own(13);
    EXPECT_EQ(StepFolders(checkpoints), (std::vector<std::string>{"step-00000010", "step-00000013"}));
    EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000013\n");
  }
}

// After two resumes, each from an earlier step than the run it left had reached, the
// line runs through three runs, and only the folders of each up to where the next went
// on count. Run A wrote 2, 4, 6, 8; B went on from A's 4 and wrote 7 and 10; C goes on
// from B's 7 and writes 8 and 9, keeping 4: its line is 9, 8, 7 and A's 4, so A's 2
// goes and A's 6 and B's 10, newer than the oldest kept, stay. (Counting every folder up
// to the resume step would keep A's 6 and remove A's 4.)
TEST_F(Resume, PruningAfterTwoResumesFollowsTheLineThroughEveryRun) {
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const ModelConfig config{Architecture::kGpt, 2, 2, 32, 256, 16};
  const auto write = [&](std::int64_t step, const CheckpointLine& line) {
    WriteCheckpoint(checkpoints, {step, {{"w", torch::ones({3})}}, {}, std::nullopt, std::nullopt}, config,
                    TrainingRecipe{}, line);
  };
  const CheckpointLine a{0xa, {}};
  for (std::int64_t step : {2, 4, 6, 8}) write(step, a);
  const CheckpointLine b = a.ContinuedBy(0xb, 4);
  for (std::int64_t step : {7, 10}) write(step, b);
  const CheckpointLine c = b.ContinuedBy(0xc, 7);
  for (std::int64_t step : {8, 9}) {
    write(step, c);
    PruneCheckpoints(checkpoints, 4, c);
  }
  EXPECT_EQ(StepFolders(checkpoints), (std::vector<std::string>{"step-00000004", "step-00000006", "step-00000007",
                                                                "step-00000008", "step-00000009", "step-00000010"}));
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000009\n");

  // A folder whose meta.json cannot be read is on no line: with B's 7 torn, keeping 3
  // reaches down to A's 4 (A's 6 and B's 10 are not C's line), keeping 2 to C's 8.
  scratch.Write("checkpoints/step-00000007/meta.json", "{\"format\": ");
  write(9, c);
  PruneCheckpoints(checkpoints, 3, c);
  EXPECT_EQ(StepFolders(checkpoints), (std::vector<std::string>{"step-00000004", "step-00000006", "step-00000007",
                                                                "step-00000008", "step-00000009", "step-00000010"}))
      << "kept: 9, 8 and A's 4; nothing older to remove";
  PruneCheckpoints(checkpoints, 2, c);
  EXPECT_EQ(StepFolders(checkpoints), (std::vector<std::string>{"step-00000008", "step-00000009", "step-00000010"}))
      << "kept: 9 and 8; A's 4 and 6 and the torn 7 are older";
}

// End to end, every checkpoint records its run and the runs its line went through, and
// the run that writes learns the line from the rank that read the checkpoint: here rank
// 1, which alone is given --resume, while rank 0 writes.
TEST_F(Resume, EveryCheckpointRecordsItsLineThoughAnotherRankReadTheResume) {
  const std::string two = WritePlan(scratch, "two.json", 1, {{5, 3}, {4, 2}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const std::vector<std::string> writes = {"--checkpoint-dir", checkpoints};
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 2, writes)).AllSucceeded());
  std::vector<std::string> resumed = writes;
  resumed.insert(resumed.end(), {"--resume", checkpoints});
  ASSERT_TRUE(RunJob(scratch, 2, Args(scratch, two, 4, resumed)).AllSucceeded());
  const JobOutcome third = RunJob(scratch, {Args(scratch, two, 5, writes), Args(scratch, two, 5, resumed)});
  ASSERT_TRUE(third.AllSucceeded()) << third.Describe();

  const auto meta = [&](int step) {
    return nlohmann::json::parse(ReadWholeFile(checkpoints + "/step-0000000" + std::to_string(step) + "/meta.json"));
  };
  const nlohmann::json a = meta(2), b = meta(4), c = meta(5);
  for (const nlohmann::json& run : {a["run"], b["run"], c["run"]}) {
    ASSERT_TRUE(run.is_string() && run.get<std::string>().size() == 16u) << run;
  }
  EXPECT_NE(a["run"], b["run"]);
  EXPECT_NE(b["run"], c["run"]);
  EXPECT_EQ(a["line"], nlohmann::json::array());
  EXPECT_EQ(b["line"], nlohmann::json::parse("[{\"run\": " + a["run"].dump() + ", \"step\": 2}]"));
  EXPECT_EQ(c["line"], nlohmann::json::parse("[{\"run\": " + a["run"].dump() +
                                             ", \"step\": 2}, {\"run\": " + b["run"].dump() + ", \"step\": 4}]"));
}

// End to end: the worker gives the writer the step it resumed from. Steps 2 and 4 of
// the first line, 8 (and perhaps 6) of a later run; resumed from 4 to step 5 with
// --keep-checkpoints 2, the run keeps its 5 and 4, removes 2, and leaves the abandoned
// run's later folders (without the resume step it counted only 5 and removed nothing).
TEST_F(Resume, AResumedRunKeepsTheCheckpointItWentOnFrom) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const std::vector<std::string> every_two = {"--checkpoint-dir", checkpoints, "--checkpoint-every", "2"};
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 2, every_two)).AllSucceeded());  // a run's last is always written
  std::vector<std::string> resumed = every_two;
  resumed.insert(resumed.end(), {"--resume", checkpoints});
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 4, resumed)).AllSucceeded());
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 8, resumed)).AllSucceeded());
  const JobOutcome again = RunJob(
      scratch, 1,
      Args(scratch, one, 5,
           {"--resume", checkpoints + "/step-00000004", "--checkpoint-dir", checkpoints, "--keep-checkpoints", "2"}));
  ASSERT_TRUE(again.AllSucceeded()) << again.Describe();
  std::vector<std::string> folders = StepFolders(checkpoints);
  folders.erase(std::remove(folders.begin(), folders.end(), "step-00000006"), folders.end());  // written or not
  EXPECT_EQ(folders, (std::vector<std::string>{"step-00000004", "step-00000005", "step-00000008"}));
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000005\n");
}

// The checkpoint --resume reads is an input: a --save or --metrics inside it would
// overwrite a step's weights or meta.json (exit 0; the next resume differed or failed).
TEST_F(Resume, AnOutputInsideTheCheckpointItResumesFromIsRefused) {
  const std::string one = WritePlan(scratch, "one.json", 0, {{4}});
  const std::string checkpoints = scratch.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch, 1, Args(scratch, one, 2, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  const std::string step = checkpoints + "/step-00000002";
  const std::string weights_before = ReadWholeFile(step + "/model.pt");
  for (const auto& [flag, path] : {std::pair{"--save", step + "/model.pt"}, std::pair{"--metrics", step + "/meta.json"},
                                   std::pair{"--save", checkpoints + "/latest"}}) {
    SCOPED_TRACE(path);
    const JobOutcome job = RunJob(scratch, 1, Args(scratch, one, 3, {"--resume", checkpoints, flag, path}));
    EXPECT_EQ(job.exit_codes[0], 1) << job.Describe();
    EXPECT_TRUE(ContainsAll(job.errors[0], {flag, "is inside --resume " + checkpoints})) << job.errors[0];
  }
  EXPECT_EQ(ReadWholeFile(step + "/model.pt"), weights_before);
  EXPECT_EQ(ReadWholeFile(checkpoints + "/latest"), "step-00000002\n");
}

// A checkpoint is a state to go on from: parameters or moments that hold inf or nan (an
// update that overflowed after a finite loss) are refused, and nothing of it is left on
// the disk, not even its temporary folder; `latest` stays on the last good one.
TEST_F(Resume, ACheckpointHoldingInfOrNanIsNotWritten) {
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const ModelConfig config{Architecture::kGpt, 2, 2, 32, 256, 16};
  Checkpoint good{1, {{"w", torch::ones({3})}}, {}, std::nullopt, std::nullopt};
  WriteCheckpoint(checkpoints, good, config, TrainingRecipe{}, {});
  for (const bool in_moments : {false, true}) {
    torch::Tensor bad = torch::ones({3});
    bad[1] = std::numeric_limits<float>::infinity();
    Checkpoint checkpoint{2, {{"w", in_moments ? torch::ones({3}) : bad}}, {}, std::nullopt, std::nullopt};
    if (in_moments) checkpoint.moments["w"] = {torch::zeros({3}), bad};
    try {
      WriteCheckpoint(checkpoints, checkpoint, config, TrainingRecipe{}, {});
      ADD_FAILURE() << "a checkpoint with inf was written";
    } catch (const std::runtime_error& error) {
      EXPECT_TRUE(Contains(error.what(), "training diverged at step 2")) << error.what();
      EXPECT_TRUE(Contains(error.what(), in_moments ? "exp_avg_sq.w holds inf or nan" : "w holds inf or nan"))
          << error.what();
    }
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000001"}));
  }
}

}  // namespace
}  // namespace poplar::testing
