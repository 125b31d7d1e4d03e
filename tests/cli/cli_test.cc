// Runs the real `poplar` binary as a child process and checks what a user sees: exit
// status, stdout, stderr and the files written (docs/operations.md, docs/formats.md).
//
// Exit statuses (planner/cli/main.cc): 0 success, 1 bad input, 2 bad usage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "child_process.h"
#include "test_support.h"

namespace {

using Json = nlohmann::json;

// What one run of the binary produced.
struct Outcome {
  int exit_code = -1;  // 128 + signal number if it was killed
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

std::string SourcePath(const std::string& relative) { return std::string(POPLAR_SOURCE_DIR) + "/" + relative; }

std::string ExampleCluster(const std::string& name) { return SourcePath("configs/" + name + ".yaml"); }

const std::string& ExampleProfiles() {
  static const std::string dir = SourcePath("configs/profiles/gpt2-medium");
  return dir;
}

using ::poplar::testing::Contains;
using ::poplar::testing::ContainsAll;
using ::poplar::testing::IsOneLine;

// Parses stdout as exactly one JSON document (nothing else but trailing whitespace).
Json ParseOneDocument(const std::string& out) {
  try {
    return Json::parse(out);
  } catch (const Json::exception& error) {
    ADD_FAILURE() << "stdout is not one JSON document (" << error.what() << "):\n" << out;
  }
  return Json::object();
}

// Each test gets a fresh folder: `work_` is the child's working directory (so a
// command that writes to its default path leaves the source tree alone) and holds
// the files a test writes; the child's stdout and stderr go to `io_`.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(work_);
    std::filesystem::create_directories(io_);
  }

  // Runs `poplar args...` in `cwd` (default: work_), stdin from /dev/null.
  Outcome Poplar(const std::vector<std::string>& args, const std::string& cwd = "") {
    ::poplar::testing::ChildOptions options;
    options.argv = {POPLAR_BINARY};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.cwd = cwd.empty() ? work_ : cwd;
    const auto outcome = ::poplar::testing::RunProcess(options, io_);
    EXPECT_NE(outcome.exit_code, 126) << "could not set up the child";
    EXPECT_NE(outcome.exit_code, 127) << "could not run " << POPLAR_BINARY;
    EXPECT_NE(outcome.exit_code, -1) << "timed out";
    return {outcome.exit_code, outcome.out, outcome.err};
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = work_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // The v100-and-t4 example with a job training gpt2-medium, the model of its shipped
  // profiles, and credentials (which launch needs, though no agent is reached).
  std::string GptMediumJobCluster() {
    return WriteExampleVariant("v100-and-t4", "nodes:",
                               "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\n"
                               "job: {model: " +
                                   SourcePath("configs/models/gpt2-medium.json") +
                                   ", data: t.bin, steps: 2}\n"
                                   "nodes:");
  }

  // An example cluster file with `from` replaced by `to` and its profiles given by
  // absolute path, written to work_/`name`.
  std::string WriteExampleVariant(const std::string& example, const std::string& from, const std::string& to,
                                  const std::string& name = "cluster.yaml") {
    std::string text = ReadFile(ExampleCluster(example));
    const auto profiles = text.find("profiles: profiles/gpt2-medium");
    EXPECT_NE(profiles, std::string::npos);
    if (profiles != std::string::npos) {
      text.replace(profiles, 30, "profiles: " + ExampleProfiles());
    }
    if (!from.empty()) {
      const auto at = text.find(from);
      EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in " << example;
      if (at != std::string::npos) text.replace(at, from.size(), to);
    }
    return Write(name, text);
  }

  std::vector<std::string> WorkFiles() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(work_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  ::poplar::testing::ScratchDir scratch_{"poplar_cli_test"};
  const std::string root_ = scratch_.path();
  const std::string work_ = root_ + "/work";
  const std::string io_ = root_ + "/io";
};

// Checks the plan contract of docs/formats.md for a cluster of `devices` devices.
void ExpectValidPlan(const Json& plan, int devices, int global_batch) {
  ASSERT_TRUE(plan.is_object());
  ASSERT_TRUE(plan.contains("stage"));
  ASSERT_TRUE(plan["stage"].is_number_integer());
  const int stage = plan["stage"];
  EXPECT_GE(stage, 0);
  EXPECT_LE(stage, 3);
  ASSERT_TRUE(plan.contains("global_batch"));
  EXPECT_EQ(plan["global_batch"], global_batch);

  ASSERT_TRUE(plan.contains("ranks"));
  const Json& ranks = plan["ranks"];
  ASSERT_TRUE(ranks.is_array());
  ASSERT_EQ(ranks.size(), static_cast<std::size_t>(devices));
  long long total = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(i));
    const Json& rank = ranks[i];
    EXPECT_EQ(rank["rank"], i);
    EXPECT_TRUE(rank["host"].is_string());
    EXPECT_TRUE(rank["device"].is_string());
    ASSERT_TRUE(rank["micro_batches"].is_array());
    EXPECT_FALSE(rank["micro_batches"].empty());
    for (const Json& micro_batch : rank["micro_batches"]) {
      ASSERT_TRUE(micro_batch.is_number_integer());
      EXPECT_GE(micro_batch.get<int>(), 0);
      total += micro_batch.get<int>();
    }
    if (stage >= 2) {
      // One entry per reduce round, the same on every rank.
      EXPECT_EQ(rank["micro_batches"].size(), ranks[0]["micro_batches"].size());
    }
  }
  EXPECT_EQ(total, global_batch);

  ASSERT_TRUE(plan.contains("predicted"));
  const Json& predicted = plan["predicted"];
  ASSERT_TRUE(predicted["step_s"].is_number());
  ASSERT_TRUE(predicted["samples_per_s"].is_number());
  const double step_s = predicted["step_s"];
  const double samples_per_s = predicted["samples_per_s"];
  EXPECT_GT(step_s, 0);
  EXPECT_NEAR(samples_per_s, global_batch / step_s, 1e-6 * samples_per_s);
}

// ---------------------------------------------------------------------------
// Help and usage errors.

TEST_F(Cli, HelpListsTheCommands) {
  const Outcome run = Poplar({"--help"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"plan", "simulate", "estimate-memory"}));
  EXPECT_EQ(run.err, "");
}

TEST_F(Cli, PlanHelpListsItsFlags) {
  const Outcome run = Poplar({"plan", "--help"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"--profiles", "--json", "--output"}));
}

TEST_F(Cli, SimulateHelpListsPolicies) {
  const Outcome run = Poplar({"simulate", "--help"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"--policy", "uniform", "proportional"}));
}

TEST_F(Cli, EstimateMemoryHelpListsItsFlags) {
  const Outcome run = Poplar({"estimate-memory", "--help"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"--params", "--gpus", "--precision"}));
}

TEST_F(Cli, RejectsUnknownFlagOfCommandInOneLine) {
  const Outcome run = Poplar({"plan", ExampleCluster("v100-and-t4"), "--bogus-flag"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(Contains(run.err, "--bogus-flag"));
  EXPECT_EQ(run.out, "");
  EXPECT_FALSE(Exists(work_ + "/plan.json"));
}

// A misspelt flag is named before anything else CLI11 would check first (a missing file,
// a value "not expected"), with the nearest known option.
TEST_F(Cli, NamesAMisspeltFlagFirstAndSuggestsTheNearest) {
  const Outcome missing = Poplar({"plan", "--bogus", work_ + "/no-such.yaml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(IsOneLine(missing.err)) << missing.err;
  EXPECT_TRUE(ContainsAll(missing.err, {"poplar plan: unknown option '--bogus'", "see 'poplar plan --help'"}))
      << missing.err;
  EXPECT_FALSE(Contains(missing.err, "did you mean")) << missing.err;
  const Outcome steps = Poplar({"launch", ExampleCluster("v100-and-t4"), "--stepz", "3"});
  EXPECT_EQ(steps.exit_code, 2);
  EXPECT_TRUE(Contains(steps.err, "unknown option '--stepz'; did you mean --steps?")) << steps.err;
  const Outcome equals = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--polcy=uniform"});
  EXPECT_TRUE(Contains(equals.err, "unknown option '--polcy'; did you mean --policy?")) << equals.err;
  const Outcome top = Poplar({"--verison"});
  EXPECT_TRUE(Contains(top.err, "poplar: unknown option '--verison'; did you mean --version?")) << top.err;
  // An unknown command is named before the flags that follow it.
  const Outcome command = Poplar({"plna", "--bogus"});
  EXPECT_TRUE(Contains(command.err, "unknown command 'plna'; did you mean plan?")) << command.err;
  // Known flags, in either spelling, and values after them are left alone.
  const Outcome fine = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--policy=uniform", "--json"});
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
}

// Other usage errors are said in words, not in CLI11's own, which are its internals': a
// short option it does not know ("The following arguments were not expected: x.json
// -o"), a count that is not a number ("Value abc not in range 1 to 10000000"), a flag
// given twice ("At Most 1 required but received 2").
TEST_F(Cli, UsageErrorsSayWhatIsWrongInWords) {
  const Outcome short_option = Poplar({"simulate", ExampleCluster("v100-and-t4"), "-o", "x.json"});
  EXPECT_EQ(short_option.exit_code, 2);
  EXPECT_TRUE(Contains(short_option.err, "poplar simulate: unknown option '-o'")) << short_option.err;
  for (const std::string gpus : {"abc", "1.5", "0"}) {
    const Outcome count = Poplar({"estimate-memory", "--params", "355M", "--gpus", gpus});
    EXPECT_EQ(count.exit_code, 2);
    EXPECT_TRUE(IsOneLine(count.err)) << count.err;
    EXPECT_TRUE(Contains(count.err, "--gpus: must be a whole number from 1 to 10000000, got '" + gpus + "'"))
        << count.err;
  }
  const Outcome twice =
      Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", work_ + "/a.json", "-o", work_ + "/b.json"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_TRUE(Contains(twice.err, "poplar plan: --output is given 2 times; give it once")) << twice.err;
  EXPECT_FALSE(std::filesystem::exists(work_ + "/a.json"));
  // A value that starts with '-' is a value, not a short option.
  for (const std::string gpus : {"-4", "-x"}) {
    const Outcome negative = Poplar({"estimate-memory", "--params", "355M", "--gpus", gpus});
    EXPECT_TRUE(Contains(negative.err, "--gpus: must be a whole number from 1 to 10000000, got '" + gpus + "'"))
        << negative.err;
  }
}

// An argument no command takes is quoted, so that an empty one ('') is seen.
TEST_F(Cli, NamesAnUnexpectedArgumentEvenAnEmptyOne) {
  const Outcome empty = Poplar({"plan", ExampleCluster("v100-and-t4"), ""});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_TRUE(IsOneLine(empty.err)) << empty.err;
  EXPECT_TRUE(Contains(empty.err, "poplar plan: unexpected argument '' (an empty argument)")) << empty.err;
  const Outcome two = Poplar({"plan", ExampleCluster("v100-and-t4"), "extra", "more"});
  EXPECT_TRUE(Contains(two.err, "poplar plan: unexpected arguments 'extra', 'more'")) << two.err;
  EXPECT_FALSE(Exists(work_ + "/plan.json"));
}

TEST_F(Cli, RejectsUnknownTopLevelFlagByName) {
  const Outcome run = Poplar({"--bogus-flag"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(Contains(run.err, "--bogus-flag"));
}

TEST_F(Cli, RejectsUnknownCommandByName) {
  const Outcome run = Poplar({"frobnicate", ExampleCluster("v100-and-t4")});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(ContainsAll(run.err, {"unknown command 'frobnicate'", "plan, simulate"})) << run.err;
}

TEST_F(Cli, RequiresACommand) {
  const Outcome run = Poplar({});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_EQ(run.out, "");
}

TEST_F(Cli, PlanRequiresAClusterFile) {
  const Outcome run = Poplar({"plan"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(Contains(run.err, "cluster"));
}

TEST_F(Cli, RejectsMissingClusterFileInOneLine) {
  const std::string missing = work_ + "/no-such-cluster.yaml";
  const Outcome run = Poplar({"plan", missing, "-o", work_ + "/plan.json"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(Contains(run.err, missing));
  EXPECT_EQ(run.out, "");
  EXPECT_FALSE(Exists(work_ + "/plan.json"));
}

// ---------------------------------------------------------------------------
// poplar plan.

TEST_F(Cli, PlanJsonPrintsOneDocumentAndWritesThePlan) {
  const std::string output = work_ + "/out.json";
  // The relative path, as a user in the source tree types it; the cluster file's
  // relative "profiles:" must resolve against the file, not a guess.
  const Outcome run = Poplar({"plan", "configs/v100-and-t4.yaml", "-o", output, "--json"}, POPLAR_SOURCE_DIR);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const Json printed = ParseOneDocument(run.out);
  ExpectValidPlan(printed, 8, 128);
  ASSERT_TRUE(Exists(output));
  EXPECT_EQ(Json::parse(ReadFile(output)), printed);
}

TEST_F(Cli, PlanNumbersRanksInClusterFileOrder) {
  const Outcome run = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", work_ + "/plan.json", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json plan = ParseOneDocument(run.out);
  ASSERT_EQ(plan["ranks"].size(), 8u);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    const Json& rank = plan["ranks"][i];
    EXPECT_EQ(rank["host"], i < 4 ? "node-v100" : "node-t4");
    EXPECT_EQ(rank["device"], "cuda:" + std::to_string(i % 4));
    EXPECT_EQ(rank["device_type"], i < 4 ? "V100-16GB" : "T4-16GB");
  }
}

TEST_F(Cli, PlanKeepsEveryExampleClusterWithinTheContract) {
  const std::vector<std::pair<std::string, int>> examples = {
      {"a100-80-and-40", 512}, {"a800-and-v100s", 256}, {"v100-and-t4", 128}};
  for (const auto& [name, global_batch] : examples) {
    SCOPED_TRACE(name);
    const Outcome run = Poplar({"plan", ExampleCluster(name), "-o", work_ + "/" + name + ".json", "--json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    ExpectValidPlan(ParseOneDocument(run.out), 8, global_batch);
  }
}

TEST_F(Cli, PlanWithFixedStageTwoGivesEveryRankTheSameRounds) {
  const std::string cluster = WriteExampleVariant("v100-and-t4", "stage: auto", "stage: 2");
  const Outcome run = Poplar({"plan", cluster, "-o", work_ + "/plan.json", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json plan = ParseOneDocument(run.out);
  EXPECT_EQ(plan["stage"], 2);
  ExpectValidPlan(plan, 8, 128);
}

TEST_F(Cli, PlanPrintsStageTableAndWhereThePlanWent) {
  const std::string output = work_ + "/plan.json";
  const Outcome run = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", output});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_TRUE(ContainsAll(run.out, {"stage", "step", "samples/s", "rounds", "chosen", "predicted step",
                                    "plan written to " + output + "\n"}));
  // One row per stage, exactly one of them marked as chosen.
  std::istringstream lines(run.out);
  std::vector<bool> row_seen(4, false);
  int chosen_rows = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first.size() == 1 && first[0] >= '0' && first[0] <= '3') {
      row_seen[first[0] - '0'] = true;
      if (line.find(" * ") != std::string::npos) ++chosen_rows;
    }
  }
  EXPECT_EQ(row_seen, std::vector<bool>(4, true));
  EXPECT_EQ(chosen_rows, 1);
  EXPECT_TRUE(Exists(output));
}

// V100s and T4 have no bf16 (their profiles say so): mixed precision trains in fp16 and
// the plan says why; the A100s' cluster trains in bf16; bf16 asked of V100s is refused.
TEST_F(Cli, PlanSaysWhichPrecisionTheDevicesAllow) {
  const Outcome v100 = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", work_ + "/v100.json"});
  ASSERT_EQ(v100.exit_code, 0) << v100.err;
  EXPECT_TRUE(ContainsAll(v100.out, {"precision: fp16 with dynamic loss scaling: T4-16GB, V100-16GB have no bf16"}))
      << v100.out;
  const Outcome a100 = Poplar({"plan", ExampleCluster("a100-80-and-40"), "-o", work_ + "/a100.json"});
  ASSERT_EQ(a100.exit_code, 0) << a100.err;
  EXPECT_TRUE(ContainsAll(a100.out, {"precision: bf16: every device computes in it"})) << a100.out;
  const std::string bf16 = WriteExampleVariant("v100-and-t4", "precision: mixed", "precision: bf16");
  const Outcome refused = Poplar({"plan", bf16, "-o", work_ + "/bf16.json"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(ContainsAll(refused.err, {"training.precision", "is bf16, but T4-16GB, V100-16GB have no bf16"}))
      << refused.err;
}

TEST_F(Cli, PlanWritesToPlanJsonByDefault) {
  const Outcome run = Poplar({"plan", ExampleCluster("v100-and-t4"), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(Json::parse(ReadFile(work_ + "/plan.json")), ParseOneDocument(run.out));
}

TEST_F(Cli, PlanLeavesNoTemporaryFiles) {
  const Outcome run = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", work_ + "/plan.json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(WorkFiles(), std::vector<std::string>{"plan.json"});
}

TEST_F(Cli, PlanReplacesAnExistingPlan) {
  const std::string output = Write("plan.json", "old contents\n");
  const Outcome run = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", output, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(Json::parse(ReadFile(output)), ParseOneDocument(run.out));
}

// An output path that is one of the command's inputs is refused before anything is
// written: `plan -o cluster.yaml` replaced the cluster file with the plan.
TEST_F(Cli, PlanRefusesToWriteOverWhatItReads) {
  const std::string cluster = WriteExampleVariant("v100-and-t4", "", "");
  const std::string before = ReadFile(cluster);
  const Outcome itself = Poplar({"plan", cluster, "-o", cluster});
  EXPECT_EQ(itself.exit_code, 1);
  EXPECT_TRUE(IsOneLine(itself.err)) << itself.err;
  EXPECT_TRUE(ContainsAll(itself.err, {"--output", "is the cluster file", "would destroy it"})) << itself.err;
  EXPECT_EQ(ReadFile(cluster), before);
  const std::string profile = ExampleProfiles() + "/T4-16GB.json";
  const Outcome over_profile = Poplar({"plan", cluster, "-o", profile});
  EXPECT_EQ(over_profile.exit_code, 1);
  EXPECT_TRUE(Contains(over_profile.err, "is the profile of T4-16GB")) << over_profile.err;
  // The head's private key, say: a plan written over it would lock the head out.
  const std::string with_credentials = WriteExampleVariant(
      "v100-and-t4", "nodes:", "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\nnodes:",
      "with-credentials.yaml");
  const std::string key = Write("head.key", "PRIVATE KEY");
  const Outcome over_key = Poplar({"plan", with_credentials, "-o", key});
  EXPECT_EQ(over_key.exit_code, 1);
  EXPECT_TRUE(Contains(over_key.err, "is the cluster's credentials.key")) << over_key.err;
  EXPECT_EQ(ReadFile(key), "PRIVATE KEY");
  // An empty path is a mistake, not the default.
  const Outcome empty = Poplar({"plan", cluster, "-o", ""});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_TRUE(Contains(empty.err, "--output: must not be empty")) << empty.err;
}

// Without profiles, `plan` asks the agents and writes their profiles beside the plan:
// an output it cannot write (a folder, a device, a missing folder) is refused before
// any agent is asked or any profile written (no profiles/ left in /dev).
TEST_F(Cli, PlanRefusesAnOutputItCannotWriteBeforeAskingTheAgents) {
  std::string text = ReadFile(ExampleCluster("v100-and-t4"));
  text.replace(text.find("profiles: profiles/gpt2-medium\n"), 31,
               "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\n");
  const std::string cluster = Write("agents.yaml", text);
  std::filesystem::create_directories(work_ + "/folder");
  for (const auto& [output, reason] :
       std::vector<std::pair<std::string, std::string>>{{"folder", "is a folder; name a file in it"},
                                                        {"/dev/full", "not a regular file"},
                                                        {"missing/plan.json", "folder missing does not exist"}}) {
    const Outcome run = Poplar({"plan", cluster, "-o", output});
    EXPECT_EQ(run.exit_code, 1) << output;
    EXPECT_TRUE(IsOneLine(run.err)) << run.err;
    EXPECT_TRUE(ContainsAll(run.err, {"--output", reason})) << run.err;
  }
  EXPECT_FALSE(std::filesystem::exists(work_ + "/profiles"));
  EXPECT_FALSE(std::filesystem::exists(work_ + "/missing"));
}

// Launch refusals that need no agent: a resume without the job's id (it trained a new
// job from step 0), and a run directory where a file is (an internal error).
TEST_F(Cli, LaunchRefusesAResumeWithoutItsJobAndAFileAsRunDirectory) {
  const Outcome resume = Poplar({"launch", ExampleCluster("v100-and-t4"), "--resume"});
  EXPECT_EQ(resume.exit_code, 2);
  EXPECT_TRUE(Contains(resume.err, "--resume requires --job-id")) << resume.err;
  // A policy with a plan to follow would be ignored.
  const Outcome policy =
      Poplar({"launch", ExampleCluster("v100-and-t4"), "--plan", Write("any.json", "{}"), "--policy", "uniform"});
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_TRUE(ContainsAll(policy.err, {"--policy", "--plan"})) << policy.err;
  const std::string cluster =
      WriteExampleVariant("v100-and-t4", "nodes:",
                          "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\n"
                          "job: {model: " +
                              std::string(POPLAR_SOURCE_DIR) +
                              "/configs/models/gpt-tiny.json, data: t.bin, steps: 2}\n"
                              "nodes:");
  const std::string file = Write("a-file", "x");
  const Outcome run_dir = Poplar({"launch", cluster, "--run-dir", file, "--plan", Write("p.json", "{}")});
  EXPECT_EQ(run_dir.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run_dir.err)) << run_dir.err;
  EXPECT_TRUE(ContainsAll(run_dir.err, {"--run-dir", "a file is in the way"})) << run_dir.err;
}

// Under Slurm: a broken cluster file is named before Slurm is asked anything, outside an
// allocation the launch says where to run it, and the flags that make no sense there
// are refused.
TEST_F(Cli, LaunchUnderSlurmNeedsAnAllocationAndItsSection) {
  const std::string cluster =
      Write("slurm.yaml",
            "training: {global_batch: 8, precision: fp32}\n"
            "slurm: {gpus: none, emulated: [{type: emu, memory_mib: 48}]}\n"
            "job: {model: " +
                std::string(POPLAR_SOURCE_DIR) + "/configs/models/gpt-tiny.json, data: t.bin, steps: 2}\n");
  ::poplar::testing::ChildOptions outside = ::poplar::testing::Command({POPLAR_BINARY, "launch", cluster, "--slurm"});
  outside.cwd = work_;
  outside.env = {{"SLURM_JOB_ID", ""}, {"SLURM_JOB_NODELIST", ""}};
  const auto not_inside = ::poplar::testing::RunProcess(outside, io_);
  EXPECT_EQ(not_inside.exit_code, 1);
  EXPECT_TRUE(IsOneLine(not_inside.err)) << not_inside.err;
  EXPECT_TRUE(ContainsAll(not_inside.err, {"--slurm: not inside a Slurm allocation", "salloc"})) << not_inside.err;

  const Outcome no_section = Poplar({"launch", ExampleCluster("v100-and-t4"), "--slurm"});
  EXPECT_EQ(no_section.exit_code, 1);
  EXPECT_TRUE(ContainsAll(no_section.err, {"v100-and-t4.yaml", "slurm", "is required to launch under Slurm"}))
      << no_section.err;
  const Outcome no_nodes = Poplar({"launch", cluster});
  EXPECT_EQ(no_nodes.exit_code, 1);
  EXPECT_TRUE(ContainsAll(no_nodes.err, {"slurm.yaml", "nodes"})) << no_nodes.err;
  const Outcome elastic = Poplar({"launch", cluster, "--slurm", "--elastic"});
  EXPECT_EQ(elastic.exit_code, 2);
  EXPECT_TRUE(ContainsAll(elastic.err, {"--slurm", "--elastic"})) << elastic.err;
  const Outcome worker = Poplar({"launch", cluster, "--worker", cluster});
  EXPECT_EQ(worker.exit_code, 2);
  EXPECT_TRUE(ContainsAll(worker.err, {"--worker", "--slurm"})) << worker.err;
}

// A --steps that leaves a decay ending at the job's last step no step after its warm-up
// is refused before any agent is asked, naming --steps (the worker would refuse it on
// every rank).
TEST_F(Cli, LaunchRefusesStepsThatLeaveTheScheduleNoDecay) {
  const std::string cluster = WriteExampleVariant(
      "v100-and-t4", "nodes:",
      "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\n"
      "job: {model: " +
          std::string(POPLAR_SOURCE_DIR) +
          "/configs/models/gpt-tiny.json, data: t.bin, steps: 20, warmup_steps: 5, lr_decay: cosine}\n"
          "nodes:");
  const Outcome run = Poplar({"launch", cluster, "--steps", "5", "--run-dir", work_ + "/run"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run.err)) << run.err;
  EXPECT_TRUE(Contains(run.err, "--steps: is 5, not more than the 5 warm-up steps: no step is left to decay over"))
      << run.err;
  EXPECT_FALSE(Exists(work_ + "/run"));
}

// The head checks job.model as the worker will, before it asks any agent, so the error
// names the head's file, not the agent's copy of it.
TEST_F(Cli, LaunchAndProfileRefuseABadModelNamingTheHeadsFile) {
  const std::string model = Write(
      "model.json", R"({"arch": "gpt", "n_layer": 2, "n_head": 3, "n_embd": 64, "vocab_size": 256, "block_size": 32})");
  const std::string cluster =
      WriteExampleVariant("v100-and-t4", "nodes:",
                          "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\n"
                          "job: {model: model.json, data: t.bin, steps: 2}\n"
                          "nodes:");
  for (const std::string command : {"launch", "profile"}) {
    SCOPED_TRACE(command);
    const Outcome run = Poplar({command, cluster});
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_TRUE(IsOneLine(run.err)) << run.err;
    EXPECT_TRUE(ContainsAll(run.err, {model, "n_embd", "divisible by n_head"})) << run.err;
  }
}

TEST_F(Cli, BrokenClusterFileFailsInOneLineAndWritesNothing) {
  const std::string cluster = WriteExampleVariant("v100-and-t4", "count: 4", "count: -2");
  const std::string output = work_ + "/plan.json";
  for (const bool json : {false, true}) {
    SCOPED_TRACE(json ? "--json" : "text");
    std::vector<std::string> args = {"plan", cluster, "-o", output};
    if (json) args.push_back("--json");
    const Outcome run = Poplar(args);
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_TRUE(IsOneLine(run.err));
    EXPECT_TRUE(ContainsAll(
        run.err, {cluster, "nodes[0].devices[0].count", "must be a number of devices from 1 to 1000000", "-2"}));
    EXPECT_EQ(run.out, "");
    EXPECT_FALSE(Exists(output));
    EXPECT_EQ(WorkFiles(), std::vector<std::string>{"cluster.yaml"});
  }
}

TEST_F(Cli, BrokenClusterFileKeepsThePreviousPlan) {
  const std::string cluster = WriteExampleVariant("v100-and-t4", "global_batch: 128", "global_batch: 0");
  const std::string output = Write("plan.json", "{\"previous\": true}\n");
  const Outcome run = Poplar({"plan", cluster, "-o", output});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(ContainsAll(run.err, {cluster, "training.global_batch"}));
  EXPECT_EQ(ReadFile(output), "{\"previous\": true}\n");
}

TEST_F(Cli, ProfilesFlagReplacesTheClusterFilesProfiles) {
  const std::string cluster = WriteExampleVariant("v100-and-t4", "profiles: " + ExampleProfiles() + "\n", "");
  const Outcome without = Poplar({"plan", cluster, "-o", work_ + "/plan.json"});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_TRUE(IsOneLine(without.err));
  EXPECT_TRUE(ContainsAll(without.err, {cluster, "profiles", "--profiles"}));

  const Outcome with = Poplar({"plan", cluster, "--profiles", ExampleProfiles(), "-o", work_ + "/plan.json", "--json"});
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ExpectValidPlan(ParseOneDocument(with.out), 8, 128);
}

TEST_F(Cli, MissingProfileNamesTheClusterFileAndType) {
  const std::string cluster = WriteExampleVariant("v100-and-t4", "type: T4-16GB", "type: P100-16GB");
  const Outcome run = Poplar({"plan", cluster, "-o", work_ + "/plan.json"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(ContainsAll(run.err, {cluster, "P100-16GB"}));
  EXPECT_FALSE(Exists(work_ + "/plan.json"));
}

// ---------------------------------------------------------------------------
// poplar simulate.

TEST_F(Cli, SimulateUniformPrintsOneJsonDocument) {
  const Outcome run = Poplar({"simulate", ExampleCluster("a100-80-and-40"), "--policy", "uniform", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const Json result = ParseOneDocument(run.out);
  EXPECT_EQ(result["policy"], "uniform");
  EXPECT_TRUE(result["stage"].is_number_integer());
  EXPECT_EQ(result["global_batch"], 512);
  ASSERT_TRUE(result["predicted"].is_object());
  EXPECT_GT(result["predicted"]["step_s"].get<double>(), 0);
  EXPECT_GT(result["predicted"]["samples_per_s"].get<double>(), 0);
  // Simulating writes no plan.
  EXPECT_TRUE(WorkFiles().empty());
}

TEST_F(Cli, SimulatePoplarIsNoSlowerThanUniform) {
  double step_s[2] = {0, 0};
  const char* policies[2] = {"poplar", "uniform"};
  for (int i = 0; i < 2; ++i) {
    const Outcome run = Poplar({"simulate", ExampleCluster("a100-80-and-40"), "--policy", policies[i], "--json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    step_s[i] = ParseOneDocument(run.out)["predicted"]["step_s"];
  }
  EXPECT_LE(step_s[0], step_s[1] * (1 + 1e-9));
}

TEST_F(Cli, SimulateAPlanFilePredictsWhatPlanPredicted) {
  // The plan's own prediction and simulate --plan's come from one cost model: equal.
  const std::string plan_file = work_ + "/plan.json";
  const Outcome planned = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", plan_file, "--json"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const Json plan = ParseOneDocument(planned.out);
  const Outcome run = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", plan_file, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json result = ParseOneDocument(run.out);
  EXPECT_EQ(result["stage"], plan["stage"]);
  EXPECT_NEAR(result["predicted"]["step_s"].get<double>(), plan["predicted"]["step_s"].get<double>(), 1e-12);
  EXPECT_NEAR(result["predicted"]["compute_s"].get<double>(), plan["predicted"]["compute_s"].get<double>(), 1e-12);
  // Moving a sample from a V100 (rank 0) to a slower T4 (rank 7) predicts a longer step.
  Json changed = plan;
  auto& first = changed["ranks"][0]["micro_batches"];
  auto& last = changed["ranks"][7]["micro_batches"];
  first[0] = first[0].get<int>() - 1;
  last[last.size() - 1] = last[last.size() - 1].get<int>() + 1;
  const std::string changed_file = Write("changed.json", changed.dump());
  const Outcome other = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", changed_file, "--json"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_GT(ParseOneDocument(other.out)["predicted"]["step_s"].get<double>(),
            plan["predicted"]["step_s"].get<double>());
  const Outcome text = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", changed_file});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(ContainsAll(text.out, {"changed.json", "predicted step", "ms"})) << text.out;
  // Beside it, what the plan predicted when written: the same for the plan as written;
  // for one whose profiles have changed since (here, its prediction edited), the change.
  const Outcome same = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", plan_file});
  EXPECT_TRUE(Contains(same.out, "when written, the plan predicted a step of ")) << same.out;
  EXPECT_TRUE(Contains(same.out, ", the same\n")) << same.out;
  Json faster = plan;
  faster["predicted"]["step_s"] = plan["predicted"]["step_s"].get<double>() / 1.25;
  const Outcome older =
      Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", Write("older.json", faster.dump())});
  EXPECT_TRUE(Contains(older.out, "; these profiles predict 25.0 % more\n")) << older.out;
  const Outcome older_json =
      Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", work_ + "/older.json", "--json"});
  EXPECT_NEAR(ParseOneDocument(older_json.out)["when_written"]["step_s"].get<double>(),
              faster["predicted"]["step_s"].get<double>(), 1e-12);
}

// `poplar switch` checks the plan against the cluster and its profiles before it asks
// any agent: a micro-batch a device cannot hold is refused, naming the key.
TEST_F(Cli, SwitchRefusesAPlanThatDoesNotFitBeforeAskingAnyAgent) {
  const std::string plan_file = work_ + "/plan.json";
  const Outcome planned = Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", plan_file, "--json"});
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  Json plan = ParseOneDocument(planned.out);
  // Rank 0's (a V100's) first micro-batch moves onto rank 7's (a T4's) first.
  auto& first = plan["ranks"][0]["micro_batches"];
  auto& last = plan["ranks"][7]["micro_batches"];
  last[0] = last[0].get<int>() + first[0].get<int>();
  if (plan["stage"].get<int>() >= 2) {
    first[0] = 0;
  } else {
    first.erase(0);
  }
  const Outcome run = Poplar(
      {"switch", ExampleCluster("v100-and-t4"), "--job-id", "job-1", "--plan", Write("too-big.json", plan.dump())});
  EXPECT_EQ(run.exit_code, 1) << run.out;
  EXPECT_TRUE(ContainsAll(run.err, {"too-big.json", "ranks[7].micro_batches[0]"})) << run.err;
  EXPECT_EQ(run.out, "");
}

TEST_F(Cli, SimulateRejectsAPlanForAnotherCluster) {
  const std::string plan_file = work_ + "/plan.json";
  ASSERT_EQ(Poplar({"plan", ExampleCluster("v100-and-t4"), "-o", plan_file}).exit_code, 0);
  const Outcome run = Poplar({"simulate", ExampleCluster("a100-80-and-40"), "--plan", plan_file});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run.err)) << run.err;
  EXPECT_TRUE(ContainsAll(run.err, {plan_file, "global_batch", "512"})) << run.err;
  EXPECT_EQ(run.out, "");
  // Same ranks and batch, but rank 0 and rank 7 trade device types: the plan was made
  // for another order of devices, and is not simulated as if it were not.
  Json swapped = Json::parse(ReadFile(plan_file));
  std::swap(swapped["ranks"][0]["device_type"], swapped["ranks"][7]["device_type"]);
  const Outcome order =
      Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", Write("swapped.json", swapped.dump())});
  EXPECT_EQ(order.exit_code, 1);
  EXPECT_TRUE(ContainsAll(order.err, {"swapped.json: ranks[0].device_type", "is T4-16GB", "has device type V100-16GB"}))
      << order.err;
}

// Flags whose values are wrong are usage errors (exit 2), named with their command: an
// empty or missing --network (never silently the cluster file's network) and a job id
// that cannot name a folder.
TEST_F(Cli, NetworkAndJobIdFlagsAreCheckedAsFlags) {
  for (const std::string network : {"", "missing.json", "."}) {
    SCOPED_TRACE("--network '" + network + "'");
    const Outcome plan = Poplar({"plan", ExampleCluster("v100-and-t4"), "--network", network, "-o", "p.json"});
    EXPECT_EQ(plan.exit_code, 2);
    EXPECT_TRUE(IsOneLine(plan.err)) << plan.err;
    EXPECT_TRUE(ContainsAll(plan.err, {"poplar plan: ", "--network"})) << plan.err;
    EXPECT_FALSE(Exists(work_ + "/p.json"));
  }
  const Outcome job_id = Poplar({"launch", ExampleCluster("v100-and-t4"), "--job-id", "a/b"});
  EXPECT_EQ(job_id.exit_code, 2);
  EXPECT_TRUE(ContainsAll(job_id.err, {"poplar launch: ", "--job-id", "'a/b' must be 1-64 characters"})) << job_id.err;
}

// job.model is the head's to read: a missing one is named by the cluster file's key.
TEST_F(Cli, AMissingJobModelIsNamedByTheClusterFilesKey) {
  const std::string cluster =
      WriteExampleVariant("v100-and-t4", "nodes:", "job: {model: no-model.json, data: t.bin, steps: 2}\nnodes:");
  for (const std::string command : {"plan", "profile"}) {
    SCOPED_TRACE(command);
    const Outcome run = Poplar({command, cluster});
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_TRUE(IsOneLine(run.err)) << run.err;
    EXPECT_TRUE(ContainsAll(run.err, {cluster + ": job.model: ", "no-model.json", "cannot read"})) << run.err;
  }
}

// A plan records the model it was made for; following it with another model, whose
// memory its micro-batches were not sized for, is refused before any agent is asked.
TEST_F(Cli, LaunchAndSimulateRefuseAPlanForAnotherModel) {
  const std::string cluster = GptMediumJobCluster();
  const std::string plan_file = work_ + "/plan.json";
  const Outcome planned = Poplar({"plan", cluster, "-o", plan_file});  // the shipped profiles are of that model
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  ASSERT_EQ(Poplar({"simulate", cluster, "--plan", plan_file}).exit_code, 0);

  Json other_model = Json::parse(ReadFile(plan_file));
  other_model["model"]["params"] = 124439808;
  const std::string other_model_file = Write("other-model.json", other_model.dump());
  Json other_precision = Json::parse(ReadFile(plan_file));
  other_precision["model"]["precision"] = "fp32";
  const std::string other_precision_file = Write("other-precision.json", other_precision.dump());
  const std::string run_dir = work_ + "/run";
  const std::vector<std::vector<std::string>> commands = {{"simulate", cluster},
                                                          {"launch", cluster, "--run-dir", run_dir}};
  for (std::vector<std::string> command : commands) {
    SCOPED_TRACE(command[0]);
    command.insert(command.end(), {"--plan", other_model_file});
    const Outcome model = Poplar(command);
    EXPECT_EQ(model.exit_code, 1);
    EXPECT_TRUE(IsOneLine(model.err)) << model.err;
    EXPECT_TRUE(
        ContainsAll(model.err, {other_model_file + ": model.params", "124439808", "354871296", "gpt2-medium.json"}))
        << model.err;
    EXPECT_FALSE(Exists(run_dir));  // refused before the run directory was kept
  }
  for (const std::string command : {"simulate", "launch"}) {
    SCOPED_TRACE(command);
    const Outcome precision = Poplar({command, cluster, "--plan", other_precision_file});
    EXPECT_EQ(precision.exit_code, 1);
    EXPECT_TRUE(IsOneLine(precision.err)) << precision.err;
    EXPECT_TRUE(ContainsAll(precision.err, {other_precision_file + ": model.precision", "is fp32", "trains in mixed"}))
        << precision.err;
  }

  // The plan records the whole model (the profiles did): a job whose model has the same
  // size but other heads, and so other activation memory, is refused too.
  ASSERT_EQ(Json::parse(ReadFile(plan_file))["model"]["config"]["n_head"], 16);
  Write("gpt2-medium-8-heads.json",
        R"({"arch": "gpt", "n_layer": 24, "n_head": 8, "n_embd": 1024, "vocab_size": 50304, "block_size": 1024})");
  const std::string other_heads =
      WriteExampleVariant("v100-and-t4", "nodes:",
                          "credentials: {ca: ca.pem, cert: head.pem, key: head.key, token: token}\n"
                          "job: {model: gpt2-medium-8-heads.json, data: t.bin, steps: 2}\n"
                          "nodes:",
                          "other-heads.yaml");
  const Outcome heads = Poplar({"launch", other_heads, "--plan", plan_file});
  EXPECT_EQ(heads.exit_code, 1);
  EXPECT_TRUE(ContainsAll(heads.err, {plan_file + ": model.config", "\"n_head\":16", "\"n_head\":8"})) << heads.err;

  // Without a job, simulate holds the plan's model to the profiles'.
  const Outcome no_job = Poplar({"simulate", ExampleCluster("v100-and-t4"), "--plan", other_model_file});
  EXPECT_EQ(no_job.exit_code, 1);
  EXPECT_TRUE(
      ContainsAll(no_job.err, {other_model_file + ": model.params", "the profiles are of a model of 354871296"}))
      << no_job.err;
}

// A plan edited by hand beyond what a device holds is refused by launch before any
// agent is asked, against the cluster's profiles, not by a worker out of memory;
// simulate refuses it alike.
TEST_F(Cli, LaunchRefusesAPlanWhoseMicroBatchesTheDevicesCannotHold) {
  const std::string cluster = GptMediumJobCluster();
  const std::string plan_file = work_ + "/plan.json";
  ASSERT_EQ(Poplar({"plan", cluster, "-o", plan_file}).exit_code, 0);
  Json plan = Json::parse(ReadFile(plan_file));
  // Rank 4, a T4, takes all but one of rank 0's samples in one micro-batch.
  ASSERT_EQ(plan["ranks"][4]["device_type"], "T4-16GB");
  int total = 0;
  for (const int rank : {0, 4}) {
    for (const auto& size : plan["ranks"][rank]["micro_batches"]) total += size.get<int>();
  }
  const std::size_t rounds = plan["ranks"][0]["micro_batches"].size();
  const bool equal_rounds = plan["stage"].get<int>() >= 2;
  Json rank0 = Json::array({1}), rank4 = Json::array({total - 1});
  for (std::size_t i = 1; equal_rounds && i < rounds; ++i) {
    rank0.push_back(0);
    rank4.push_back(0);
  }
  plan["ranks"][0]["micro_batches"] = rank0;
  plan["ranks"][4]["micro_batches"] = rank4;
  const std::string edited = Write("edited.json", plan.dump(2));
  // The error names the entry, which is where the rank stands in the file's list.
  Json reversed = plan;
  std::reverse(reversed["ranks"].begin(), reversed["ranks"].end());
  const std::string edited_reversed = Write("edited-reversed.json", reversed.dump(2));
  const std::string rank4_reversed = "ranks[" + std::to_string(plan["ranks"].size() - 5) + "]";
  const std::string run_dir = work_ + "/run";
  for (const auto& [file, key] :
       {std::pair{edited, std::string("ranks[4]")}, std::pair{edited_reversed, rank4_reversed}}) {
    for (std::vector<std::string> command : {std::vector<std::string>{"launch", cluster, "--run-dir", run_dir},
                                             std::vector<std::string>{"simulate", cluster}}) {
      SCOPED_TRACE(command[0] + " " + file);
      command.insert(command.end(), {"--plan", file});
      const Outcome run = Poplar(command);
      EXPECT_EQ(run.exit_code, 1);
      EXPECT_TRUE(IsOneLine(run.err)) << run.err;
      EXPECT_TRUE(ContainsAll(run.err, {file + ": " + key + ".micro_batches[0]: is " + std::to_string(total - 1),
                                        "more than T4-16GB holds at stage"}))
          << run.err;
    }
  }
  EXPECT_FALSE(Exists(run_dir));
}

TEST_F(Cli, SimulateRejectsUnknownPolicy) {
  const Outcome run = Poplar({"simulate", ExampleCluster("a100-80-and-40"), "--policy", "bogus"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(ContainsAll(run.err, {"--policy", "bogus"}));
  EXPECT_EQ(run.out, "");
}

// ---------------------------------------------------------------------------
// poplar estimate-memory.

// The per-stage entries of an estimate-memory --json document, by stage.
std::vector<Json> StageEntries(const Json& estimate) {
  std::vector<Json> entries(4);
  for (const Json& entry : estimate["stages"]) entries.at(entry["stage"].get<int>()) = entry;
  return entries;
}

TEST_F(Cli, EstimateMemoryFp32FollowsZeroAccounting) {
  // P = 1000 on N = 4 in fp32: 4 bytes of parameters, 4 of gradients, 8 of Adam state
  // per parameter; partitions hold ceil(P / N) = 250 parameters.
  const Outcome run = Poplar({"estimate-memory", "--params", "1000", "--gpus", "4", "--precision", "fp32", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const Json estimate = ParseOneDocument(run.out);
  EXPECT_EQ(estimate["params"], 1000);
  EXPECT_EQ(estimate["gpus"], 4);
  EXPECT_EQ(estimate["precision"], "fp32");
  ASSERT_EQ(estimate["stages"].size(), 4u);
  const std::vector<Json> stages = StageEntries(estimate);
  const int expected[4][4] = {// parameters, gradients, optimizer, total
                              {4000, 4000, 8000, 16000},
                              {4000, 4000, 2000, 10000},
                              {4000, 1000, 2000, 7000},
                              {1000, 1000, 2000, 4000}};
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(stages[s]["parameters_bytes"], expected[s][0]);
    EXPECT_EQ(stages[s]["gradients_bytes"], expected[s][1]);
    EXPECT_EQ(stages[s]["optimizer_bytes"], expected[s][2]);
    EXPECT_EQ(stages[s]["total_bytes"], expected[s][3]);
  }
}

TEST_F(Cli, EstimateMemoryDefaultsToMixedPrecisionAndRoundsPartitionsUp) {
  // P = 1001 on N = 4 in mixed precision: 2 + 2 + 12 bytes per parameter; a partition
  // holds ceil(1001 / 4) = 251 parameters.
  const Outcome run = Poplar({"estimate-memory", "--params", "1001", "--gpus", "4", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json estimate = ParseOneDocument(run.out);
  EXPECT_EQ(estimate["precision"], "mixed");
  const std::vector<Json> stages = StageEntries(estimate);
  EXPECT_EQ(stages[0]["total_bytes"], 16 * 1001);
  EXPECT_EQ(stages[1]["total_bytes"], 2002 + 2002 + 12 * 251);
  EXPECT_EQ(stages[2]["total_bytes"], 2002 + 2 * 251 + 12 * 251);
  EXPECT_EQ(stages[3]["total_bytes"], 16 * 251);
}

TEST_F(Cli, EstimateMemoryAcceptsSuffixedParameterCounts) {
  const Outcome run = Poplar({"estimate-memory", "--params", "1.5B", "--gpus", "8", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ParseOneDocument(run.out)["params"], 1500000000);
  const Outcome trillion = Poplar({"estimate-memory", "--params", "1T", "--gpus", "1024", "--json"});
  ASSERT_EQ(trillion.exit_code, 0) << trillion.err;
  EXPECT_EQ(ParseOneDocument(trillion.out)["params"], 1000000000000);
}

// The cluster file's precision names mean the same here: bf16 and fp16 are mixed.
TEST_F(Cli, EstimateMemoryTakesTheClusterFilesPrecisionNames) {
  for (const std::string name : {"bf16", "fp16"}) {
    SCOPED_TRACE(name);
    const Outcome run = Poplar({"estimate-memory", "--params", "1001", "--gpus", "4", "--precision", name, "--json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const Json estimate = ParseOneDocument(run.out);
    EXPECT_EQ(estimate["precision"], "mixed");
    EXPECT_EQ(StageEntries(estimate)[0]["total_bytes"], 16 * 1001);
  }
}

TEST_F(Cli, EstimateMemoryPrintsATable) {
  const Outcome run = Poplar({"estimate-memory", "--params", "355M", "--gpus", "8"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"355000000", "8 GPUs", "stage", "total per GPU"}));
  const Outcome one = Poplar({"estimate-memory", "--params", "355M", "--gpus", "1"});
  EXPECT_TRUE(Contains(one.out, "on 1 GPU (")) << one.out;
}

TEST_F(Cli, EstimateMemoryRejectsParamsThatAreNotACount) {
  // A flag value out of its range is a usage error (exit 2), as --gpus 0 is.
  // Numbers beyond a double's range or below its normal range are out of range too.
  for (const std::string params : {"abc", "-5", "0", "12Q", "2.5", "1.0000005M", "0x10", "+5", " 355M", "355M ",
                                   "1e400", "5e-324", "1e-320", "1e400T"}) {
    SCOPED_TRACE(params);
    const Outcome run = Poplar({"estimate-memory", "--params", params, "--gpus", "4", "--json"});
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_TRUE(IsOneLine(run.err));
    EXPECT_TRUE(ContainsAll(run.err, {"--params", "'" + params + "'"}));
    EXPECT_EQ(run.out, "");
  }
}

TEST_F(Cli, EstimateMemoryRejectsZeroGpus) {
  const Outcome run = Poplar({"estimate-memory", "--params", "1000", "--gpus", "0"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(Contains(run.err, "--gpus"));
}

TEST_F(Cli, EstimateMemoryRejectsUnknownPrecision) {
  const Outcome run = Poplar({"estimate-memory", "--params", "1000", "--gpus", "4", "--precision", "fp8"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(IsOneLine(run.err));
  EXPECT_TRUE(ContainsAll(run.err, {"--precision", "fp8"}));
}

TEST_F(Cli, PlanNamesAMissingProfilesFolderByItsKey) {
  std::string text = ReadFile(ExampleCluster("v100-and-t4"));
  text.replace(text.find("profiles: profiles/gpt2-medium"), 30, "profiles: nowhere");
  const Outcome run = Poplar({"plan", Write("cluster.yaml", text)});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run.err)) << run.err;
  EXPECT_TRUE(ContainsAll(run.err, {"cluster.yaml: profiles: folder", "nowhere does not exist"})) << run.err;
  // A file where the folder should be is called a file, not a folder that is missing.
  Write("profiles.json", "{}");
  text.replace(text.find("profiles: nowhere"), 17, "profiles: profiles.json");
  const Outcome file = Poplar({"plan", Write("cluster.yaml", text)});
  EXPECT_EQ(file.exit_code, 1);
  EXPECT_TRUE(ContainsAll(file.err, {"cluster.yaml: profiles: ", "profiles.json is a file, not a folder of profiles"}))
      << file.err;
}

// ---------------------------------------------------------------------------
// poplar prepare-data.

TEST_F(Cli, PrepareDataWritesOneLittleEndianTokenPerByte) {
  const std::string text = Write("text.txt", "Ab\xff");
  const Outcome run = Poplar({"prepare-data", text, "-o", "tokens.bin"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(Contains(run.out, "wrote 3 tokens"));
  EXPECT_EQ(ReadFile(work_ + "/tokens.bin"), std::string("A\0b\0\xff\0", 6));
  const Outcome json = Poplar({"prepare-data", text, "-o", "again.bin", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json document = ParseOneDocument(json.out);
  EXPECT_EQ(document["tokens"], 3);
  EXPECT_EQ(document["vocab_size"], 256);
  EXPECT_EQ(document["token_width"], 16);
  EXPECT_EQ(document["tokenizer"], "bytes");
}

// An output path longer than the system takes is named by its flag in one line; a name
// of up to 255 bytes is written (its temporary name fits as well).
TEST_F(Cli, AnOutputPathTooLongIsNamedByItsFlagAndALongNameIsWritten) {
  const std::string text = Write("text.txt", "some text");
  const std::string long_name(300, 'x'), long_path = std::string(4100, 'd');
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"prepare-data", text, "-o", long_name},
        std::vector<std::string>{"prepare-data", text, "-o", long_path + "/t.bin"},
        std::vector<std::string>{"plan", ExampleCluster("v100-and-t4"), "-o", long_name}}) {
    SCOPED_TRACE(command[0] + " " + command.back().substr(0, 20));
    const Outcome run = Poplar(command);
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_TRUE(IsOneLine(run.err)) << run.err;
    EXPECT_TRUE(ContainsAll(run.err, {"--output: '", "is too long"})) << run.err;
    EXPECT_FALSE(Contains(run.err, "internal error")) << run.err;
  }
  const std::string longest_name(255, 'y');
  const Outcome run = Poplar({"prepare-data", text, "-o", longest_name});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ReadFile(work_ + "/" + longest_name).size(), 18u);
}

TEST_F(Cli, PrepareDataRefusesToWriteOverItsOwnText) {
  const std::string text = Write("text.txt", "some text");
  const Outcome run = Poplar({"prepare-data", text, "-o", "./text.txt"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(IsOneLine(run.err)) << run.err;
  EXPECT_TRUE(ContainsAll(run.err, {"--output", "is the text file itself"})) << run.err;
  EXPECT_EQ(ReadFile(text), "some text");
  const Outcome tiny = Poplar({"prepare-data", Write("tiny.txt", "a"), "-o", "tokens.bin"});
  EXPECT_EQ(tiny.exit_code, 1);
  EXPECT_TRUE(ContainsAll(tiny.err, {"tiny.txt", "at least 2 bytes"})) << tiny.err;
}

}  // namespace
