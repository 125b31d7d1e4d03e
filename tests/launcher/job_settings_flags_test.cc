// Every job setting reaches the worker: the command an agent or `poplar launch --slurm`
// gives a rank of a job that sets them all (planner/formats/train_command.h,
// job_settings.h) is one `poplar-worker train` takes, and each setting does what it
// says. A real process.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "planner/formats/job_settings.h"
#include "planner/formats/train_command.h"
#include "worker_harness.h"

namespace poplar::testing {
namespace {

TEST(JobSettingFlags, AJobSettingEveryOneTrainsWithEach) {
  ScratchDir scratch{"poplar_job_setting_flags"};
  WriteModelConfig(scratch);
  WriteTokens(scratch, 6000);
  WriteTokens(scratch, 1000, "eval.bin", "a stitch in time saves nine, said one of them");
  {  // init: every parameter 0, so that the first loss is ln(vocabulary) exactly
    Decoder zeros = MakeDecoder(LoadModelConfig(scratch.path() + "/model.json"));
    torch::NoGradGuard no_grad;
    for (auto& parameter : zeros->parameters()) parameter.zero_();
    WriteStateDict(scratch.path() + "/zeros.pt", ModelStateDict(*zeros));
  }
  const std::map<std::string, std::string> texts = {
      {"data", "tokens.bin"},    {"steps", "4"},         {"init", "zeros.pt"},      {"save_format", "safetensors"},
      {"lr", "0.002"},           {"weight_decay", "0"},  {"grad_clip", "0.5"},      {"warmup_steps", "2"},
      {"lr_decay", "linear"},    {"decay_steps", "4"},   {"min_lr", "0.0002"},      {"checkpoint_every", "1"},
      {"keep_checkpoints", "2"}, {"stop_grace_s", "60"}, {"eval_data", "eval.bin"}, {"eval_every", "2"},
      {"eval_samples", "8"},     {"batch_min", "2"},     {"batch_max", "8"},        {"batch", "adaptive"},
      {"batch_every", "5"},      {"seed", "7"}};
  ASSERT_EQ(texts.size(), JobSettingTable().size()) << "a setting this test does not set";
  const std::vector<std::string> flags =
      WorkerFlags(ParseJobSettings(texts, "settings"),
                  [&](const std::string&, const std::string& path) { return scratch.path() + "/" + path; });
  // The command agents and `poplar launch --slurm` give each rank.
  std::filesystem::create_directories(scratch.path() + "/plans");
  const TrainFiles files{
      WritePlan(scratch, "plan.json", 1, {{4}}), scratch.path() + "/model.json", scratch.path() + "/metrics.jsonl",
      scratch.path() + "/checkpoints",           scratch.path() + "/plans",      scratch.path() + "/model.safetensors",
      scratch.path() + "/trace-{rank}.json"};
  const TrainRun run{"fp32", flags, /*trace_step=*/3, /*resume=*/false, /*require_checkpoint=*/false, 60};
  std::vector<std::string> args = TrainCommand(files, run);
  args.insert(args.end(), {"--log-every", "0"});
  const JobOutcome job = RunJob(scratch, 1, args);
  ASSERT_TRUE(job.AllSucceeded()) << job.Describe();

  std::vector<nlohmann::json> records;
  for (const std::string& line : ReadLines(scratch.path() + "/metrics.jsonl")) {
    records.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(records.size(), 4u);  // steps
  // batch_min, batch_max: bounds around the plan's batch, which the run trains with (a
  // switch to another is AdaptiveBatch.*'s).
  EXPECT_EQ(records[0]["global_batch"], 4);
  EXPECT_NEAR(records[0]["loss"].get<double>(), std::log(256.0), 1e-6);  // init
  // warmup_steps 2 to lr 0.002, then a line to min_lr 0.0002 at step decay_steps + 1.
  EXPECT_DOUBLE_EQ(records[0]["lr"].get<double>(), 0.001);
  EXPECT_DOUBLE_EQ(records[1]["lr"].get<double>(), 0.002);
  EXPECT_DOUBLE_EQ(records[3]["lr"].get<double>(), 0.0011);
  EXPECT_FALSE(records[0].contains("val_loss"));  // eval_every 2 over eval_data
  EXPECT_TRUE(records[1].contains("val_loss")) << records[1];
  EXPECT_TRUE(records[3].contains("val_loss")) << records[3];
  int kept = 0;  // checkpoint_every 1, keep_checkpoints 2
  for (const auto& entry : std::filesystem::directory_iterator(scratch.path() + "/checkpoints")) {
    kept += entry.is_directory() && entry.path().filename().string().rfind("step-", 0) == 0;
  }
  EXPECT_EQ(kept, 2);
  EXPECT_TRUE(std::filesystem::exists(scratch.path() + "/model.safetensors"));  // save_format
  EXPECT_TRUE(std::filesystem::exists(scratch.path() + "/trace-0.json"));       // trace_step

  // batch_min and batch_max reach the worker: bounds that leave out the plan's batch of 4
  // are refused before the rendezvous, naming them.
  std::map<std::string, std::string> above = texts;
  above["batch_min"] = "5";
  TrainRun bounds = run;
  bounds.setting_flags =
      WorkerFlags(ParseJobSettings(above, "settings"),
                  [&](const std::string&, const std::string& path) { return scratch.path() + "/" + path; });
  const std::vector<std::string> bounded = TrainCommand(files, bounds);
  const JobOutcome refused = RunJob(scratch, 1, bounded);
  EXPECT_EQ(refused.exit_codes[0], 1) << refused.Describe();
  EXPECT_TRUE(Contains(refused.errors[0], "global_batch: is 4, outside --batch-min 5")) << refused.errors[0];
}

}  // namespace
}  // namespace poplar::testing
