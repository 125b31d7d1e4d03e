// Bad inputs to poplar-worker: each gives one clear error naming the file and reason,
// a non-zero exit on every rank, and no process left running.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "child_process.h"
#include "launcher/device/device.h"
#include "planner/base/command_failed.h"
#include "planner/base/free_port.h"
#include "planner/base/text_file.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

class WorkerBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteModelConfig(scratch_);
    WriteTokens(scratch_, 4000);
  }
  // The workers' --timeout: far above kAtOnce, so that a rank that waits it out instead of
  // stopping at once fails the test even on a loaded machine (tests of the timeout itself
  // set a short one).
  static constexpr int kTimeoutSeconds = 300;
  // How long a test waits for an error said "at once": long for a start under load.
  static constexpr std::chrono::seconds kAtOnce{60};

  std::vector<std::string> Args(const std::string& plan, std::vector<std::string> extra = {}, int steps = 2) {
    extra.insert(extra.begin(), {"--timeout", std::to_string(kTimeoutSeconds)});
    return TrainCommand(scratch_, plan, steps, extra);
  }
  // Every rank ended (none killed at the deadline) with exit 1 and `words` in stderr.
  void ExpectRejected(const JobOutcome& job, std::initializer_list<std::string> words) {
    for (std::size_t r = 0; r < job.exit_codes.size(); ++r) {
      EXPECT_EQ(job.exit_codes[r], 1) << job.Describe();
      EXPECT_TRUE(ContainsAll(job.errors[r], words)) << job.errors[r];
      EXPECT_TRUE(Contains(job.errors[r], "poplar-worker[rank " + std::to_string(r) + "]: error:"));
    }
  }

  // A worker process with `args` as rank `rank` of `world_size` at 127.0.0.1:`port`, in
  // the scratch folder.
  ChildOptions RankOptions(const std::vector<std::string>& args, int rank, int world_size, int port) const {
    ChildOptions options;
    options.argv = {POPLAR_WORKER_BINARY};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.env = {{"RANK", std::to_string(rank)},
                   {"WORLD_SIZE", std::to_string(world_size)},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)},
                   {"OMP_NUM_THREADS", "1"}};
    options.cwd = scratch_.path();
    return options;
  }

  // Starts one worker process per entry of `ranks` ({RANK, WORLD_SIZE}) on one rendezvous,
  // each with a plan for its WORLD_SIZE, as from several plan files; stderr in rank<i>.err.
  std::vector<std::unique_ptr<ChildProcess>> StartRanks(const std::vector<std::pair<int, int>>& ranks, int steps = 2) {
    const int port = FindFreePort();
    std::vector<std::unique_ptr<ChildProcess>> processes;
    for (const auto& [rank, world_size] : ranks) {
      const std::string plan = WritePlan(scratch_, "plan" + std::to_string(world_size) + ".json", 0,
                                         std::vector<std::vector<int>>(world_size, std::vector<int>{4}));
      ChildOptions options = RankOptions(Args(plan, {}, steps), rank, world_size, port);
      options.stderr_path = scratch_.path() + "/rank" + std::to_string(processes.size()) + ".err";
      processes.push_back(std::make_unique<ChildProcess>(options));
    }
    return processes;
  }

  ScratchDir scratch_{"poplar_worker_bad_input"};
};

TEST_F(WorkerBadInput, PlanWhoseMicroBatchesDoNotSumToTheGlobalBatch) {
  const std::string plan =
      scratch_.Write("plan.json", R"({"stage": 0, "global_batch": 10, "ranks": [{"rank": 0, "micro_batches": [4]},
                                                                 {"rank": 1, "micro_batches": [4]}]})");
  ExpectRejected(RunJob(scratch_, 2, Args(plan)), {plan, "sum to 8", "global_batch is 10"});
}

TEST_F(WorkerBadInput, PlanWithFewerRanksThanTheJob) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}, {4}});
  ExpectRejected(RunJob(scratch_, 3, Args(plan)), {plan, "2 ranks", "WORLD_SIZE is 3"});
}

TEST_F(WorkerBadInput, PlanWithAMissingRankNumber) {
  const std::string plan =
      scratch_.Write("plan.json", R"({"stage": 0, "global_batch": 8, "ranks": [{"rank": 0, "micro_batches": [4]},
                                                                {"rank": 0, "micro_batches": [4]}]})");
  ExpectRejected(RunJob(scratch_, 2, Args(plan)), {plan, "ranks[1].rank", "appears twice"});
}

TEST_F(WorkerBadInput, StageTwoPlanWithUnequalRounds) {
  const std::string plan = WritePlan(scratch_, "plan.json", 2, {{4, 4}, {8}});
  ExpectRejected(RunJob(scratch_, 2, Args(plan)), {plan, "same number of micro-batches"});
}

TEST_F(WorkerBadInput, NcclWithoutAGpu) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}, {4}});
  ExpectRejected(RunJob(scratch_, 2, Args(plan, {"--backend", "nccl"})), {"--backend", "nccl", "CUDA tensors"});
}

TEST_F(WorkerBadInput, CudaOnAWorkerWithoutIt) {
  if (BuiltWithCuda() && torch::cuda::is_available()) GTEST_SKIP() << "this worker can use a GPU here";
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  ExpectRejected(RunJob(scratch_, 1, Args(plan, {"--device", "cuda"})), {"--device", "cuda"});
}

// An emulated device on CPUs the worker may not run on is refused, naming --cpus.
TEST_F(WorkerBadInput, CpusItMayNotRunOn) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  ExpectRejected(RunJob(scratch_, 1, Args(plan, {"--cpus", "1023"})), {"--cpus", "CPU 1023 is not one"});
}

// A nan learning rate is refused, not trained to a nan loss.
TEST_F(WorkerBadInput, HyperparametersThatAreNotFiniteNumbersAreUsageErrors) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{{"--lr", "nan"},
                                                                                    {"--eps", "inf"},
                                                                                    {"--weight-decay", "nan"},
                                                                                    {"--grad-clip", "-1"},
                                                                                    {"--slowdown", "nan"},
                                                                                    {"--bucket-mb", "nan"},
                                                                                    {"--threads", "1.5"},
                                                                                    {"--lr", "1e38"}}) {
    const JobOutcome job = RunJob(scratch_, 1, Args(plan, {flag, value}));
    EXPECT_EQ(job.exit_codes[0], 2) << flag << " " << value << ": " << job.Describe();
    EXPECT_TRUE(ContainsAll(job.errors[0], {flag + ": must be", "got '" + value + "'"})) << job.errors[0];
  }
}

// Counts beyond --steps' bound (2^40) are refused, not saturated to INT64_MAX, and so are
// seeds beyond 32 bits, not cut to their low 32 bits.
TEST_F(WorkerBadInput, CountsAndSeedsBeyondTheirRangeAreUsageErrors) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const std::string tokens = scratch_.path() + "/tokens.bin";
  for (const auto& [flags, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--eval-data", tokens, "--eval-samples", "99999999999999999999"},
            "--eval-samples: must be a whole number from 0 to 1099511627776"},
           {{"--warmup-steps", "1099511627777"}, "--warmup-steps: must be a whole number from 0 to 1099511627776"},
           {{"--memory-bytes", "1e300"}, "--memory-bytes: must be a whole number from 0 to 1125899906842624"},
           {{"--seed", "4294967297"}, "--seed: must be a whole number from 0 to 4294967295"},
           {{"--seed", "-1"}, "--seed: must be a whole number from 0 to 4294967295"}}) {
    const JobOutcome job = RunJob(scratch_, 1, Args(plan, flags));
    EXPECT_EQ(job.exit_codes[0], 2) << flags[0] << ": " << job.Describe();
    EXPECT_TRUE(Contains(job.errors[0], expected)) << job.errors[0];
  }
}

// A learning-rate schedule that would change nothing, or leave no step to decay over,
// is named by the flag that set it, before the rendezvous.
TEST_F(WorkerBadInput, ScheduleFlagsThatChangeNothingOrLeaveNoDecayAreNamed) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  for (const auto& [flags, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--min-lr", "1e-5"}, "--min-lr: is for a decay: add --lr-decay cosine or linear"},
           {{"--decay-steps", "3"}, "--decay-steps: is for a decay"},
           {{"--lr-decay", "cosine", "--warmup-steps", "2"},
            "--steps: is 2, not more than the 2 warm-up steps: no step is left to decay over"},
           {{"--lr-decay", "linear", "--decay-steps", "1", "--warmup-steps", "1"}, "--decay-steps: is 1"},
           {{"--lr-decay", "cosine", "--lr", "1e-3", "--min-lr", "0.01"},
            "--min-lr: must be from 0 to the peak learning rate (0.001), got 0.01"}}) {
    const JobOutcome job = RunJob(scratch_, 1, Args(plan, flags));
    EXPECT_EQ(job.exit_codes[0], 1) << job.Describe();
    EXPECT_TRUE(Contains(job.errors[0], expected)) << job.errors[0];
  }
  const JobOutcome job = RunJob(scratch_, 1, Args(plan, {"--lr-decay", "step"}));
  EXPECT_EQ(job.exit_codes[0], 2) << job.Describe();
  EXPECT_TRUE(Contains(job.errors[0], "--lr-decay: step not in {constant,cosine,linear}")) << job.errors[0];
}

// --cuda-graphs is on or off (a CPU run takes either and replays nothing).
TEST_F(WorkerBadInput, TheCudaGraphsFlagIsOnOrOff) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const JobOutcome job = RunJob(scratch_, 1, Args(plan, {"--cuda-graphs", "sometimes"}));
  EXPECT_EQ(job.exit_codes[0], 2) << job.Describe();
  EXPECT_TRUE(Contains(job.errors[0], "--cuda-graphs: sometimes not in {on,off,true,false}")) << job.errors[0];
  EXPECT_EQ(RunJob(scratch_, 1, Args(plan, {"--cuda-graphs", "off"})).exit_codes[0], 0);
}

// Checkpoint settings without a folder to write in are refused, not ignored.
TEST_F(WorkerBadInput, CheckpointSettingsNeedACheckpointFolder) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  for (const std::string flag : {"--checkpoint-every", "--keep-checkpoints"}) {
    const JobOutcome job = RunJob(scratch_, 1, Args(plan, {flag, "2"}));
    EXPECT_EQ(job.exit_codes[0], 2) << job.Describe();
    EXPECT_TRUE(Contains(job.errors[0], flag + " requires --checkpoint-dir")) << job.errors[0];
  }
}

TEST_F(WorkerBadInput, SaveIntoAFolderThatDoesNotExist) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  ExpectRejected(RunJob(scratch_, 1, Args(plan, {"--save", scratch_.path() + "/missing/model.pt"})),
                 {"--save", "missing does not exist"});
}

// A device that runs out of memory is said to, in the plan's terms: which entry of which
// file, at which step, and what to do, not just the bytes the allocator was asked for.
// (This model's states take about 0.55 MB at stage 0; a micro-batch of 64 samples about
// 8 MB more.)
TEST_F(WorkerBadInput, RunningOutOfDeviceMemoryNamesThePlanEntryOrTheStage) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{64}, {64}});
  const JobOutcome job = RunJob(scratch_, {Args(plan, {}, 1), Args(plan, {"--memory-bytes", "2000000"}, 1)});
  EXPECT_EQ(job.exit_codes[1], 1) << job.Describe();
  EXPECT_TRUE(
      ContainsAll(job.errors[1], {"poplar-worker[rank 1]: error: " + plan + ": ranks[1].micro_batches[0]: ",
                                  "its micro-batch of 64 samples at step 1 ran out of device memory",
                                  "of 2000000 bytes in use", "the plan asks more of this device than it holds"}))
      << job.errors[1];
  EXPECT_NE(job.exit_codes[0], 0) << job.Describe();

  const std::string one = WritePlan(scratch_, "one.json", 0, {{4}});
  ExpectRejected(
      RunJob(scratch_, 1, Args(one, {"--memory-bytes", "300000"})),
      {one + ": stage: the model's states at ZeRO stage 0", "ran out of device memory", "a device with more memory"});
  ExpectRejected(RunJob(scratch_, 1, Args(one, {"--memory-bytes", "100000"})),
                 {"model.json: the model (", "parameters) ran out of device memory"});
  // Reading --init (the model and the file's tensors at once) is not called a damaged file.
  ASSERT_TRUE(RunJob(scratch_, 1, Args(one, {"--save", "init.pt"}, 1)).AllSucceeded());
  ExpectRejected(RunJob(scratch_, 1, Args(one, {"--init", "init.pt", "--memory-bytes", "200000"})),
                 {"model.json: the model (", "parameters, with --init read beside it) ran out of device memory"});
}

// Every output is checked before the first step: a folder that takes no files (/proc,
// where even root cannot make one), a folder named where a file should be, and a file
// the job reads, which an output must never replace (a token file overwritten by
// metrics).
TEST_F(WorkerBadInput, OutputsThatCannotBeWrittenOrAreInputsAreRefusedBeforeTraining) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const std::string tokens = scratch_.path() + "/tokens.bin";
  const std::string tokens_before = ReadWholeFile(tokens);
  std::filesystem::create_directories(scratch_.path() + "/out");
  const std::string metrics = scratch_.path() + "/m.jsonl";
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--save", "/proc/model.pt"}, {"--save", "cannot write in folder /proc: its file system takes no new files"}},
      {{"--checkpoint-dir", "/proc"}, {"--checkpoint-dir", "cannot write in folder /proc"}},
      {{"--save", "out/"}, {"--save", "is a folder; name a file in it"}},
      // A path longer than the system takes, named by its flag.
      {{"--save", std::string(300, 's')}, {"--save: '", "is too long"}},
      {{"--metrics", std::string(300, 'm')}, {"--metrics: '", "is too long"}},
      {{"--trace", std::string(300, 't')}, {"--trace: '", "is too long"}},
      {{"--checkpoint-dir", std::string(300, 'c')}, {"--checkpoint-dir: '", "is too long"}},
      {{"--save", plan}, {"--save", "is the plan (--plan), which this command reads"}},
      {{"--metrics", tokens}, {"--metrics", "is the token file (--data)"}},
      {{"--metrics", "out/"}, {"--metrics", "is a folder; name a file in it"}},
      {{"--metrics", "out/m{rank}.jsonl", "--save", "/proc/x.pt"}, {"--save", "/proc"}},
      // One output another's: the state dict would replace the metrics, or meet the
      // checkpoint folder only after the training.
      {{"--save", metrics}, {"--save", metrics + " is also --metrics; each output needs a path of its own"}},
      {{"--checkpoint-dir", "ck", "--save", "ck/"}, {"--save", "ck/ is also --checkpoint-dir"}},
      // Nor inside the checkpoint folder, whose `latest`, step folders and pruning would
      // replace or delete it (exit 0, the model lost).
      {{"--checkpoint-dir", "ck", "--save", "ck/latest"}, {"--save", "ck/latest is inside --checkpoint-dir ck"}},
      {{"--metrics", "ck/.poplar.lock", "--checkpoint-dir", "ck"},
       {"--metrics", "ck/.poplar.lock is inside --checkpoint-dir ck, which holds the checkpoints alone"}}};
  for (const auto& [flags, words] : cases) {
    std::vector<std::string> extra = flags;
    if (flags[0] != "--metrics") extra.insert(extra.end(), {"--metrics", metrics});
    const JobOutcome job = RunJob(scratch_, 1, Args(plan, extra, 1000));
    EXPECT_EQ(job.exit_codes[0], 1) << job.Describe();
    for (const std::string& word : words) EXPECT_TRUE(Contains(job.errors[0], word)) << job.errors[0];
    EXPECT_FALSE(std::filesystem::exists(metrics)) << "a step ran before the refusal: " << flags[1];
    EXPECT_FALSE(std::filesystem::exists(scratch_.path() + "/out/m0.jsonl")) << flags[1];
  }
  EXPECT_EQ(ReadWholeFile(tokens), tokens_before);
}

// Metrics are appended to, not replaced: a device will do (/dev/stdout, /dev/null, a
// pipe), where a replaced output (--save) refuses one.
TEST_F(WorkerBadInput, MetricsMayGoToADevice) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const JobOutcome job = RunJob(scratch_, 1, Args(plan, {"--metrics", "/dev/null"}, 2));
  EXPECT_TRUE(job.AllSucceeded()) << job.Describe();
}

// A pipe is written to as it is: with a reader, every line reaches it (the check must
// not open and close the pipe, which would end the reader's input); without one, the
// rank stops at once saying so. A write that fails (a full disk) stops the job rather
// than losing the lines.
TEST_F(WorkerBadInput, MetricsToAPipeReachItsReaderAndFailedWritesStopTheJob) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const std::string pipe = scratch_.path() + "/pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  const JobOutcome unread = RunJob(scratch_, 1, Args(plan, {"--metrics", pipe}, 2));
  ExpectRejected(unread, {"--metrics", "no process reads this pipe"});
  std::string received;
  std::thread reader([&] {
    std::ifstream in(pipe);  // blocks until the worker opens it for writing
    received.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the reader waits in its open
  const JobOutcome read = RunJob(scratch_, 1, Args(plan, {"--metrics", pipe}, 3));
  reader.join();
  EXPECT_TRUE(read.AllSucceeded()) << read.Describe();
  EXPECT_EQ(std::count(received.begin(), received.end(), '\n'), 3) << received;
  ExpectRejected(RunJob(scratch_, 1, Args(plan, {"--metrics", "/dev/full"}, 2)),
                 {"--metrics", "/dev/full: cannot write: No space left on device"});
}

TEST_F(WorkerBadInput, TokenFileWithAnOddNumberOfBytes) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  scratch_.Write("tokens.bin", "abc");
  ExpectRejected(RunJob(scratch_, 1, Args(plan)), {"tokens.bin", "odd number of bytes"});
}

TEST_F(WorkerBadInput, InitFileThatIsNotAStateDict) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const std::string init = scratch_.Write("init.pt", "this is not a pickle");
  ExpectRejected(RunJob(scratch_, 1, Args(plan, {"--init", init, "--metrics", "m.jsonl"})), {init, "not a state dict"});
  EXPECT_FALSE(std::filesystem::exists(scratch_.path() + "/m.jsonl"))
      << "a run that never started left its metrics file";
}

// A tensor whose data record is shorter than the pickle says is refused, not read past
// its end.
TEST_F(WorkerBadInput, AStateDictWithATruncatedDataRecordIsRefused) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  ASSERT_TRUE(RunJob(scratch_, 1, Args(plan, {"--save", "whole.pt"}, 1)).AllSucceeded());
  const std::string torn = scratch_.path() + "/torn.pt";
  std::filesystem::copy_file(scratch_.path() + "/whole.pt", torn);
  TruncateDataRecord(torn, "data/0", 4);
  ExpectRejected(RunJob(scratch_, 1, Args(plan, {"--init", torn})),
                 {torn, "is damaged or truncated", "no data record holds"});
}

TEST_F(WorkerBadInput, CorruptCheckpoint) {
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{4}, {4}});
  const std::string checkpoints = scratch_.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch_, 2, Args(plan, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  scratch_.Write("checkpoints/step-00000002/model.pt", "garbage");
  // Only rank 0 reads a checkpoint (it sends the state to the others): one rank shows it.
  const std::string one = WritePlan(scratch_, "one.json", 1, {{8}});
  ExpectRejected(RunJob(scratch_, 1, Args(one, {"--resume", checkpoints}, 3)),
                 {"step-00000002/model.pt", "not a state dict"});
}

TEST_F(WorkerBadInput, RanksStartedWithDifferentSettings) {
  // Only rank 0 would save at the end: at stage 3 saving is collective, so the ranks
  // must refuse to start rather than deadlock at the end.
  const std::string plan = WritePlan(scratch_, "plan.json", 3, {{4}, {4}});
  std::vector<std::string> saving = Args(plan, {"--save", "out.pt"});
  auto ranks = StartJob(scratch_, {saving, Args(plan)});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->Wait(kAtOnce), 1);
    EXPECT_TRUE(ContainsAll(ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err"),
                            {"job settings", "differ", "'save' is"}));
  }
}

// Every rank must step with the same optimizer and cut the same samples: a rank with
// another --lr, or another token file, would train on silently, and the result would
// not be the single device's.
TEST_F(WorkerBadInput, RanksWithAnotherOptimizerOrOtherDataAreToldWhatDiffers) {
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{4}, {4}});
  auto ranks = StartJob(scratch_, {Args(plan), Args(plan, {"--lr", "0.1"})});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->Wait(kAtOnce), 1) << "rank " << r;
    const std::string err = ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err");
    EXPECT_TRUE(ContainsAll(err, {"job settings", "differ", "'lr' is", "0.1"})) << err;
  }
  std::vector<std::string> other_data = Args(plan);
  std::string tokens = ReadWholeFile(scratch_.path() + "/tokens.bin");
  std::swap(tokens[0], tokens[2]);  // as many tokens, two of them swapped
  *std::find(other_data.begin(), other_data.end(), scratch_.path() + "/tokens.bin") =
      scratch_.Write("other.bin", tokens);
  ranks = StartJob(scratch_, {Args(plan), other_data});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->Wait(kAtOnce), 1) << "rank " << r;
    const std::string err = ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err");
    EXPECT_TRUE(ContainsAll(err, {"job settings", "differ", "'data_fingerprint' is"})) << err;
  }
}

// The ranks agree on the job before the resume's broadcasts, which the model shapes:
// with another model on rank 1 the broadcasts would abort in a Gloo size check or wait
// out --timeout; instead the message says which setting differs.
TEST_F(WorkerBadInput, RanksResumingWithDifferentModelsAreToldWhatDiffers) {
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{4}, {4}});
  const std::string checkpoints = scratch_.path() + "/checkpoints";
  ASSERT_TRUE(RunJob(scratch_, 2, Args(plan, {"--checkpoint-dir", checkpoints})).AllSucceeded());
  const std::string smaller = scratch_.Write(
      "smaller.json",
      R"({"arch": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 256, "block_size": 16})");
  std::vector<std::string> other_model = Args(plan, {}, 4);
  *std::find(other_model.begin(), other_model.end(), scratch_.path() + "/model.json") = smaller;
  auto ranks = StartJob(scratch_, {Args(plan, {"--resume", checkpoints}, 4), other_model});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->Wait(kAtOnce), 1) << "rank " << r;
    EXPECT_TRUE(ContainsAll(ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err"),
                            {"job settings", "differ", "'model' is", "\"n_embd\":32", "\"n_embd\":16"}))
        << ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err");
  }
}

// c10d lists every address it failed to bind; rank 0 says which port, in a few words.
TEST_F(WorkerBadInput, ARendezvousPortInUseIsNamed) {
  const int port = FindFreePort();
  const HeldPort taken(port);
  ASSERT_TRUE(taken.held());
  const ChildOptions options =
      RankOptions(Args(WritePlan(scratch_, "plan.json", 0, {{4}}), {"--backend", "gloo"}), 0, 1, port);
  const ProcessOutcome outcome = RunProcess(options, scratch_.path(), std::chrono::seconds(60));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.err;
  EXPECT_TRUE(Contains(outcome.err, "poplar-worker[rank 0]: error: rank 0 cannot host the rendezvous: port " +
                                        std::to_string(port) + " (MASTER_PORT) is in use on this node"))
      << outcome.err;
}

// Rank 0 hosts the rendezvous: a MASTER_ADDR of another machine (192.0.2.1, TEST-NET-1,
// is no one's) is named as such, not reached for.
TEST_F(WorkerBadInput, AMasterAddrOfAnotherMachineIsNamedOnRankZero) {
  ChildOptions options =
      RankOptions(Args(WritePlan(scratch_, "plan.json", 0, {{4}, {4}}), {}, 2), 0, 2, FindFreePort());
  options.env["MASTER_ADDR"] = "192.0.2.1";
  const ProcessOutcome outcome = RunProcess(options, scratch_.path(), std::chrono::seconds(60));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.err;
  EXPECT_TRUE(Contains(outcome.err,
                       "environment MASTER_ADDR: 192.0.2.1 is not an address of this machine; rank 0 "
                       "hosts the rendezvous"))
      << outcome.err;
}

// The torchrun variables are read strictly: set but empty or padded is a mistake in a
// script, not the default (RANK= ran as rank 0).
TEST_F(WorkerBadInput, TorchrunVariablesThatAreSetButNotNumbersAreNamed) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}});
  const std::pair<std::string, std::string> cases[] = {
      {"RANK", ""}, {"RANK", " 0"}, {"WORLD_SIZE", "1x"}, {"MASTER_PORT", "99999"}, {"MASTER_ADDR", ""}};
  for (const auto& [name, value] : cases) {
    ChildOptions options;
    options.argv = {POPLAR_WORKER_BINARY};
    for (const std::string& arg : Args(plan)) options.argv.push_back(arg);
    options.env = {{"OMP_NUM_THREADS", "1"}, {name, value}};
    options.cwd = scratch_.path();
    const ProcessOutcome outcome = RunProcess(options, scratch_.path(), std::chrono::seconds(60));
    EXPECT_EQ(outcome.exit_code, 1) << name << "='" << value << "': " << outcome.err;
    EXPECT_TRUE(Contains(outcome.err, "environment " + name + ": ")) << outcome.err;
  }
  // A MASTER_ADDR that names no machine, on a rank of two: at once, not after --timeout
  // (300 s here; the deadline is 60 s).
  ChildOptions options = RankOptions(Args(plan), 1, 2, FindFreePort());
  options.env["MASTER_ADDR"] = "no-such-host.invalid";
  const ProcessOutcome outcome = RunProcess(options, scratch_.path(), std::chrono::seconds(60));
  EXPECT_EQ(outcome.exit_code, 1) << outcome.err;
  EXPECT_TRUE(Contains(outcome.err, "environment MASTER_ADDR: 'no-such-host.invalid' names no machine")) << outcome.err;
}

// A rank that never comes: rank 0 says which rendezvous did not complete and which rank
// is missing, not c10d's bare "Socket Timeout", and gives up after one --timeout, not
// the store's and then Gloo's.
TEST_F(WorkerBadInput, ARankThatNeverJoinsIsNamedAsSuch) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}, {4}});
  std::vector<std::string> args = Args(plan);
  const auto timeout = std::find(args.begin(), args.end(), "--timeout");
  ASSERT_NE(timeout, args.end());
  *(timeout + 1) = "4";
  const int port = FindFreePort();
  ChildOptions options = RankOptions(args, 0, 2, port);
  const auto start = std::chrono::steady_clock::now();
  const ProcessOutcome outcome = RunProcess(options, scratch_.path(), std::chrono::seconds(60));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(outcome.exit_code, kPeerFailureExitStatus) << outcome.err;
  EXPECT_TRUE(ContainsAll(outcome.err, {"poplar-worker[rank 0]: error: the rendezvous at 127.0.0.1:" +
                                            std::to_string(port) + " did not complete within --timeout",
                                        "rank 1 of 2 (WORLD_SIZE) never joined"}))
      << outcome.err;
  EXPECT_LT(waited, 8.0) << "two --timeout waits, one after the other";

  // And rank 1 alone says it never reached rank 0, not c10d's "client socket has timed out".
  options.env["RANK"] = "1";
  const ProcessOutcome alone = RunProcess(options, scratch_.path(), std::chrono::seconds(60));
  EXPECT_EQ(alone.exit_code, kPeerFailureExitStatus) << alone.err;
  EXPECT_TRUE(Contains(alone.err, "poplar-worker[rank 1]: error: cannot reach rank 0's rendezvous at 127.0.0.1:" +
                                      std::to_string(port) + " within --timeout; is rank 0 started"))
      << alone.err;
  // Its error is the one line: c10d's own log of the failed connection is not printed too.
  EXPECT_FALSE(Contains(alone.err, "socket.cpp")) << alone.err;
}

// A rank started with another WORLD_SIZE (and a plan for it) is named as such, at once,
// on both sides, whichever is larger, not as "not all 2 ranks joined" after --timeout.
TEST_F(WorkerBadInput, RanksStartedWithDifferentWorldSizesAreToldSo) {
  const std::vector<std::vector<std::pair<int, int>>> jobs = {{{0, 2}, {1, 3}}, {{0, 3}, {1, 2}}};
  const std::vector<std::vector<std::string>> said = {
      {"WORLD_SIZE is 2 here but 3 on rank 1", "WORLD_SIZE is 3 here but 2 on rank 0"},
      {"rank 1 was started with WORLD_SIZE 2", "WORLD_SIZE is 2 here but 3 on rank 0"}};
  // A rank that saw the difference itself failed on its own (1); one told by the other,
  // because of it (kPeerFailureExitStatus).
  const std::vector<std::vector<int>> status = {{1, 1}, {kPeerFailureExitStatus, 1}};
  for (std::size_t job = 0; job < jobs.size(); ++job) {
    auto ranks = StartRanks(jobs[job]);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(ranks[r]->Wait(kAtOnce), status[job][r]) << "job " << job << " rank " << r;
      const std::string err = ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err");
      EXPECT_TRUE(Contains(err, said[job][r])) << err;
    }
  }
}

// A RANK given to two processes: the second to arrive says so at once, and any rank
// still waiting for the others is told; the two that met may train on.
TEST_F(WorkerBadInput, ARankStartedTwiceIsNamed) {
  auto processes = StartRanks({{0, 2}, {1, 2}, {1, 2}}, 1000000);
  const auto err = [&](std::size_t i) { return ReadWholeFile(scratch_.path() + "/rank" + std::to_string(i) + ".err"); };
  std::size_t taken = processes.size();
  for (int tick = 0; tick < 1200 && taken == processes.size(); ++tick) {  // 60 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (std::size_t i = 0; i < processes.size(); ++i) {
      if (Contains(err(i), "RANK 1 is taken by another process")) taken = i;
    }
  }
  ASSERT_LT(taken, processes.size()) << err(0) << err(1) << err(2);
  EXPECT_EQ(processes[taken]->Wait(kAtOnce), 1);
  // The others train on, or stopped saying why (Wait would stop a running one, and its
  // peer's error would then be the test's doing: their output is read instead).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (std::size_t i = 0; i < processes.size(); ++i) {
    if (i != taken && Contains(err(i), "error:")) {
      EXPECT_TRUE(Contains(err(i), "RANK 1 was given to two processes")) << err(i);
    }
  }
}

// A run that diverges stops at the first step whose loss, gradient norm or held-out loss
// is not a number, on every rank, before writing anything of it: the newest checkpoint
// and the metrics hold only good steps (a nan held-out loss would be a null in the
// metrics).
TEST_F(WorkerBadInput, ADivergingRunStopsAtItsFirstNanStepKeepingTheLastGoodCheckpoint) {
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{4}, {4}});
  const std::string checkpoints = scratch_.path() + "/checkpoints";
  const JobOutcome job = RunJob(scratch_, 2,
                                Args(plan,
                                     {"--lr", "1000", "--grad-clip", "0", "--checkpoint-dir", checkpoints,
                                      "--checkpoint-every", "1", "--metrics", "m{rank}.jsonl", "--eval-data",
                                      scratch_.path() + "/tokens.bin", "--eval-every", "1", "--eval-samples", "8"},
                                     40));
  ExpectRejected(job, {"training diverged at step", "nothing of this step was written", "--lr"});
  const std::vector<std::string> lines = ReadLines(scratch_.path() + "/m0.jsonl");
  ASSERT_FALSE(lines.empty());
  ASSERT_LT(lines.size(), 40u);
  for (const std::string& line : lines) EXPECT_FALSE(Contains(line, "null")) << line;
  const std::string diverged = "training diverged at step " + std::to_string(lines.size() + 1) + ":";
  EXPECT_TRUE(Contains(job.errors[0], diverged)) << job.errors[0];
  const std::string latest = Trimmed(ReadWholeFile(checkpoints + "/latest"));
  EXPECT_EQ(latest, "step-" + std::string(8 - std::to_string(lines.size()).size(), '0') + std::to_string(lines.size()));
  for (const auto& [name, tensor] : ReadStateDict(checkpoints + "/" + latest + "/model.pt")) {
    EXPECT_TRUE(torch::isfinite(tensor).all().item<bool>()) << name;
  }
}

// A rank that stops before the rendezvous (a bad folder of its own) tells rank 0, which
// stops at once naming it, rather than waiting out --timeout and saying rank 1 "never
// joined".
TEST_F(WorkerBadInput, ARankStoppingBeforeTheRendezvousTellsRankZeroWhy) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}, {4}});
  const auto args = Args(plan, {"--checkpoint-dir", scratch_.path() + "/checkpoints"}, 1000000);
  std::vector<std::string> bad = args;
  *(std::find(bad.begin(), bad.end(), "--checkpoint-dir") + 1) = "/proc";  // no file can be made there
  auto ranks = StartJob(scratch_, {args, bad});
  EXPECT_EQ(ranks[1]->Wait(kAtOnce), 1);
  EXPECT_EQ(ranks[0]->Wait(kAtOnce), kPeerFailureExitStatus) << "rank 0 waited for a rank that had stopped";
  const std::string err = ReadWholeFile(scratch_.path() + "/rank0.err");
  EXPECT_TRUE(
      ContainsAll(err, {"rank 1 stopped before the rendezvous: --checkpoint-dir: cannot write in folder /proc"}))
      << err;
}

// So does a rank whose command line its build refuses (a worker older than the flags it
// was given), rather than leaving rank 0 to wait out --timeout.
TEST_F(WorkerBadInput, ARankRefusingItsCommandLineTellsRankZeroWhy) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}, {4}});
  const auto args = Args(plan, {}, 1000000);
  std::vector<std::string> bad = args;
  bad.push_back("--stepz");
  auto ranks = StartJob(scratch_, {args, bad});
  EXPECT_EQ(ranks[1]->Wait(kAtOnce), 2);
  EXPECT_EQ(ranks[0]->Wait(kAtOnce), kPeerFailureExitStatus) << "rank 0 waited for a rank that had stopped";
  const std::string err = ReadWholeFile(scratch_.path() + "/rank0.err");
  EXPECT_TRUE(Contains(err,
                       "poplar-worker[rank 0]: error: rank 1 stopped before the rendezvous: poplar-worker train: "
                       "unknown option '--stepz'"))
      << err;
  const std::string own = ReadWholeFile(scratch_.path() + "/rank1.err");
  EXPECT_EQ(own,
            "poplar-worker train: unknown option '--stepz'; did you mean --steps? (see 'poplar-worker train "
            "--help')\n");
}

// And the other way round: rank 0 stopping before the rendezvous hosts the store long
// enough to tell the others why, rather than leaving them to wait out --timeout and ask
// whether rank 0 started.
TEST_F(WorkerBadInput, RankZeroStoppingBeforeTheRendezvousTellsTheOthersWhy) {
  const std::string plan = WritePlan(scratch_, "plan.json", 0, {{4}, {4}, {4}});
  const auto args = Args(plan, {"--checkpoint-dir", scratch_.path() + "/checkpoints"}, 1000000);
  std::vector<std::string> bad = args;
  *(std::find(bad.begin(), bad.end(), "--checkpoint-dir") + 1) = "/proc";  // no file can be made there
  auto ranks = StartJob(scratch_, {bad, args, args});
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks[r]->Wait(kAtOnce), r == 0 ? 1 : kPeerFailureExitStatus) << "rank " << r;
  for (int r = 1; r < 3; ++r) {
    const std::string err = ReadWholeFile(scratch_.path() + "/rank" + std::to_string(r) + ".err");
    EXPECT_TRUE(Contains(err, "poplar-worker[rank " + std::to_string(r) +
                                  "]: error: rank 0 stopped before the rendezvous: --checkpoint-dir: cannot write in "
                                  "folder /proc"))
        << err;
  }
}

TEST_F(WorkerBadInput, AKilledRankEndsTheOthersWithAnError) {
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{4}, {4}});
  const auto args = Args(plan, {"--metrics", scratch_.path() + "/m{rank}.jsonl"}, 1000000);
  auto ranks = StartJob(scratch_, {args, args});
  // Wait until training runs, then kill rank 1 as a crash would.
  for (int i = 0; i < 600 && ReadLines(scratch_.path() + "/m1.jsonl").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(ReadLines(scratch_.path() + "/m1.jsonl").empty());
  ranks[1]->Signal(SIGKILL);
  EXPECT_EQ(ranks[1]->Wait(kAtOnce), 128 + SIGKILL);
  const int survivor = ranks[0]->Wait(kAtOnce);
  EXPECT_EQ(survivor, kPeerFailureExitStatus) << "rank 0 should fail cleanly, not hang (-1) or crash";
  // In a user's terms, not Gloo's bare "[./gloo/transport/tcp/pair.cc:598] Connection closed by peer".
  const std::string err = ReadWholeFile(scratch_.path() + "/rank0.err");
  EXPECT_TRUE(ContainsAll(err, {"poplar-worker[rank 0]: error: the ", " failed: another rank left the job"})) << err;
  EXPECT_FALSE(Contains(err, "gloo/transport")) << err;
}

// A rank that stops answering (SIGSTOP, as a hung process) ends the others after one
// --timeout, saying that not every rank took part.
TEST_F(WorkerBadInput, AStuckRankEndsTheOthersAfterTheTimeout) {
  const std::string plan = WritePlan(scratch_, "plan.json", 1, {{4}, {4}});
  auto args = Args(plan, {"--metrics", scratch_.path() + "/m{rank}.jsonl"}, 1000000);
  *(std::find(args.begin(), args.end(), "--timeout") + 1) = "3";
  auto ranks = StartJob(scratch_, {args, args});
  for (int i = 0; i < 600 && ReadLines(scratch_.path() + "/m1.jsonl").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(ReadLines(scratch_.path() + "/m1.jsonl").empty());
  ranks[1]->Signal(SIGSTOP);
  EXPECT_EQ(ranks[0]->Wait(std::chrono::seconds(30)), kPeerFailureExitStatus)
      << "rank 0 should give up after --timeout, not hang";
  ranks[1]->Signal(SIGKILL);
  const std::string err = ReadWholeFile(scratch_.path() + "/rank0.err");
  EXPECT_TRUE(
      ContainsAll(err, {"poplar-worker[rank 0]: error: the ", " failed: not every rank took part within --timeout"}))
      << err;
}

}  // namespace
}  // namespace poplar::testing
