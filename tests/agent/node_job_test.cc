// From a Launch request to worker command lines: the node's ranks map to its devices,
// the torchrun environment is set, and bad requests are refused before anything runs.
#include "agent/node_job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "test_support.h"

namespace poplar {
namespace {

using poplar::testing::Contains;
using poplar::testing::ScratchDir;

const char kPlan[] = R"({"stage": 2, "global_batch": 24, "ranks": [
  {"rank": 0, "node": "a", "host": "10.0.0.1", "device_type": "emu-fast", "micro_batches": [10]},
  {"rank": 1, "node": "b", "host": "10.0.0.2", "device_type": "emu-slow", "micro_batches": [4]},
  {"rank": 2, "node": "b", "host": "10.0.0.2", "device_type": "emu-slow", "micro_batches": [4]},
  {"rank": 3, "node": "b", "host": "10.0.0.2", "device_type": "emu-fast", "micro_batches": [6]}]})";

struct Fixture {
  ScratchDir dir{"node-job"};
  AgentConfig config;
  std::vector<DeviceInfo> devices;
  LaunchSettings settings;

  Fixture() {
    config.work_dir = std::filesystem::canonical(dir.path()).string();
    config.worker = "/bin/true";
    dir.Write("tokens.bin", std::string(1000, 'x'));
    DeviceInfo fast{"emu-fast", 0, 48 << 20, "", true, {"emu-fast", 1, 2, 1.0, 0, 48 << 20}, {}};
    DeviceInfo slow{"emu-slow", 1, 20 << 20, "", true, {"emu-slow", 1, 1, 2.5, 0, 20 << 20}, {}};
    DeviceInfo slow2 = slow;
    slow2.index = 2;
    devices = {fast, slow, slow2};
    settings.job_id = "j1";
    settings.node = "b";
    settings.plan_json = kPlan;
    settings.model_config_json =
        R"({"arch": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 8, "vocab_size": 256, "block_size": 8})";
    settings.master_addr = "10.0.0.1";
    settings.master_port = 29500;
    settings.job_settings = {{"data", "tokens.bin"}, {"steps", "10"}};
  }
};

bool Has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// What CheckNodeJob refuses the fixture's job with (the InputError's text), or "" when it
// takes it.
std::string RefusalOf(const Fixture& f) {
  try {
    CheckNodeJob(f.config, f.devices, f.settings);
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

std::string After(const std::vector<std::string>& args, const std::string& flag) {
  const auto found = std::find(args.begin(), args.end(), flag);
  return found == args.end() || found + 1 == args.end() ? "" : *(found + 1);
}

TEST(NodeJob, MapsTheNodesRanksToItsDevicesWithTheTorchrunEnvironment) {
  Fixture f;
  f.settings.job_settings["weight_decay"] = "0";  // a value (decay off), not "the default"
  f.settings.job_settings["keep_checkpoints"] = "3";
  f.settings.job_settings["warmup_steps"] = "100";
  f.settings.job_settings["lr_decay"] = "cosine";
  f.settings.job_settings["min_lr"] = "0";  // a value, not "the default" (lr / 10)
  const auto ranks = PrepareNodeJob(f.config, f.devices, f.settings);
  ASSERT_EQ(ranks.size(), 3u);  // ranks 1, 2, 3 run on node b
  EXPECT_EQ(After(ranks[0].spec.args, "--weight-decay"), "0");
  EXPECT_EQ(After(ranks[0].spec.args, "--lr"), "");  // unset: the worker's default
  EXPECT_EQ(After(ranks[0].spec.args, "--keep-checkpoints"), "3");
  EXPECT_EQ(After(ranks[0].spec.args, "--warmup-steps"), "100");
  EXPECT_EQ(After(ranks[0].spec.args, "--lr-decay"), "cosine");
  EXPECT_EQ(After(ranks[0].spec.args, "--min-lr"), "0");
  EXPECT_FALSE(Has(ranks[0].spec.args, "--decay-steps"));  // unset: the worker's default, --steps
  f.settings.job_settings["decay_steps"] = "5000";
  EXPECT_EQ(After(PrepareNodeJob(f.config, f.devices, f.settings)[0].spec.args, "--decay-steps"), "5000");
  EXPECT_EQ(ranks[0].rank, 1);
  EXPECT_EQ(ranks[2].rank, 3);
  EXPECT_EQ(After(ranks[0].spec.args, "--slowdown"), "2.5");
  EXPECT_EQ(After(ranks[2].spec.args, "--slowdown"), "1");
  EXPECT_EQ(After(ranks[2].spec.args, "--threads"), "2");
  EXPECT_EQ(After(ranks[1].spec.args, "--memory-bytes"), std::to_string(20 << 20));
  EXPECT_EQ(ranks[0].spec.program, "/bin/true");
  EXPECT_EQ(ranks[0].spec.args.front(), "train");
  for (const char* variable : {"RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=3", "MASTER_ADDR=10.0.0.1",
                               "MASTER_PORT=29500", "OMP_NUM_THREADS=1"}) {
    EXPECT_TRUE(Has(ranks[1].spec.env, variable)) << variable;
  }
  const std::string job = f.config.work_dir + "/jobs/j1";
  EXPECT_EQ(After(ranks[0].spec.args, "--data"), f.config.work_dir + "/tokens.bin");
  EXPECT_EQ(ReadTextFile(job + "/plan.json"), kPlan);
  EXPECT_EQ(ranks[1].metrics_path, job + "/metrics/rank-2.jsonl");
  EXPECT_EQ(ranks[1].spec.cwd, job);
}

// CheckNodeJob is PrepareNodeJob without the writing: the same processes, no job folder.
TEST(NodeJob, CheckingBuildsTheSameRanksAndWritesNothing) {
  Fixture f;
  const auto checked = CheckNodeJob(f.config, f.devices, f.settings);
  EXPECT_FALSE(std::filesystem::exists(f.config.work_dir + "/jobs")) << "a check wrote the job's folder";
  const auto prepared = PrepareNodeJob(f.config, f.devices, f.settings);
  ASSERT_EQ(checked.size(), prepared.size());
  for (std::size_t i = 0; i < checked.size(); ++i) {
    EXPECT_EQ(checked[i].rank, prepared[i].rank);
    EXPECT_EQ(checked[i].device, prepared[i].device);
    EXPECT_EQ(checked[i].spec.args, prepared[i].spec.args);
    EXPECT_EQ(checked[i].spec.env, prepared[i].spec.env);
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(f.config.work_dir + "/jobs/j1/model.json"));
  f.settings.job_settings["data"] = "missing.bin";
  EXPECT_THROW(CheckNodeJob(f.config, f.devices, f.settings), InputError);
}

TEST(NodeJob, ANetworkJobRunsTheWorkersNetworkModeWithoutModelOrData) {
  Fixture f;
  f.settings.kind = LaunchSettings::Kind::kNetwork;
  f.settings.model_config_json.clear();
  f.settings.job_settings.clear();
  f.settings.precision = "bf16";
  f.settings.network_max_bytes = 1 << 20;
  f.settings.timeout_s = 30;
  const auto ranks = PrepareNodeJob(f.config, f.devices, f.settings);
  ASSERT_EQ(ranks.size(), 3u);
  const std::string job = f.config.work_dir + "/jobs/j1";
  const auto& args = ranks[0].spec.args;
  EXPECT_EQ(args.front(), "network");
  EXPECT_EQ(After(args, "--precision"), "bf16");
  EXPECT_EQ(After(args, "--max-bytes"), std::to_string(1 << 20));
  EXPECT_EQ(After(args, "--metrics"), job + "/metrics/rank-{rank}.jsonl");
  EXPECT_EQ(After(args, "--timeout"), "30");
  EXPECT_EQ(After(args, "--memory-bytes"), std::to_string(20 << 20));  // the emulated device's flags
  for (const char* train_only : {"--plan", "--data", "--model-config", "--steps", "--save", "--checkpoint-dir"}) {
    EXPECT_FALSE(Has(args, train_only)) << train_only;
  }
  EXPECT_TRUE(Has(ranks[1].spec.env, "WORLD_SIZE=4"));
  EXPECT_FALSE(std::filesystem::exists(job + "/model.json"));
  f.settings.network_max_bytes = 100;  // below the two sizes a fit needs
  EXPECT_THROW(PrepareNodeJob(f.config, f.devices, f.settings), InputError);
  f.settings.network_max_bytes = 0;
  f.settings.resume = true;  // a measurement starts afresh
  EXPECT_THROW(PrepareNodeJob(f.config, f.devices, f.settings), InputError);
}

TEST(NodeJob, RefusesADataPathOutsideTheWorkDirectory) {
  Fixture f;
  f.settings.job_settings["data"] = "../../etc/passwd";
  EXPECT_THROW(PrepareNodeJob(f.config, f.devices, f.settings), InputError);
  f.settings.job_settings["data"] = "/etc/passwd";
  EXPECT_THROW(PrepareNodeJob(f.config, f.devices, f.settings), InputError);
  EXPECT_FALSE(std::filesystem::exists(f.config.work_dir + "/jobs/j1"));  // nothing written
}

// --trace-step N: each rank traces the N-th step into the job folder's traces/; 0 and
// unset trace nothing; a negative step is refused, naming the field.
TEST(NodeJob, ATracedStepWritesIntoTheJobFolder) {
  Fixture f;
  EXPECT_FALSE(Has(PrepareNodeJob(f.config, f.devices, f.settings)[0].spec.args, "--trace"));
  EXPECT_FALSE(std::filesystem::exists(f.config.work_dir + "/jobs/j1/traces"));
  f.settings.resume = true;  // the job folder is there now
  f.settings.trace_step = 4;
  const auto ranks = PrepareNodeJob(f.config, f.devices, f.settings);
  EXPECT_EQ(After(ranks[0].spec.args, "--trace"), f.config.work_dir + "/jobs/j1/traces/rank-{rank}.json");
  EXPECT_EQ(After(ranks[0].spec.args, "--trace-step"), "4");
  EXPECT_TRUE(std::filesystem::is_directory(f.config.work_dir + "/jobs/j1/traces"));
  f.settings.trace_step = -1;
  const std::string refusal = RefusalOf(f);
  EXPECT_TRUE(Contains(refusal, "trace_step")) << "a negative trace_step: " << refusal;
}

// The held-out evaluation's flags only with its file, resolved inside the work directory
// as the training data is; outside it, or counts without it, are refused.
TEST(NodeJob, TheEvaluationTakesAFileInsideTheWorkDirectory) {
  Fixture f;
  EXPECT_FALSE(Has(PrepareNodeJob(f.config, f.devices, f.settings)[0].spec.args, "--eval-data"));
  f.settings.resume = true;  // the job folder is there now
  f.dir.Write("valid.bin", std::string(100, 'x'));
  f.settings.job_settings["eval_data"] = "valid.bin";
  f.settings.job_settings["eval_every"] = "50";
  const auto ranks = PrepareNodeJob(f.config, f.devices, f.settings);
  EXPECT_EQ(After(ranks[0].spec.args, "--eval-data"), f.config.work_dir + "/valid.bin");
  EXPECT_EQ(After(ranks[0].spec.args, "--eval-every"), "50");
  EXPECT_FALSE(Has(ranks[0].spec.args, "--eval-samples"));  // unset: the worker's default, every sample
  f.settings.job_settings["eval_every"] = "0";              // after the last step only, which the worker's 0 means too
  EXPECT_EQ(After(PrepareNodeJob(f.config, f.devices, f.settings)[0].spec.args, "--eval-every"), "0");
  f.settings.job_settings["eval_every"] = "50";
  const auto refused_naming = [&f](const std::string& field) {
    const std::string refusal = RefusalOf(f);
    EXPECT_TRUE(Contains(refusal, field)) << "expected a refusal naming " << field << ": " << refusal;
  };
  f.settings.job_settings["eval_data"] = "../../etc/passwd";
  refused_naming("eval_data");
  f.settings.job_settings["eval_data"] = "missing.bin";
  refused_naming("eval_data");
  f.settings.job_settings.erase("eval_data");
  refused_naming("eval_every");
}

// init names a file or a Hugging Face folder in the work directory; save_format names
// the final weights' file.
TEST(NodeJob, InitialWeightsComeFromTheWorkDirectoryAndTheFinalOnesInTheFormatAsked) {
  Fixture f;
  const auto args = [&f] { return PrepareNodeJob(f.config, f.devices, f.settings)[0].spec.args; };
  const auto plain = args();
  EXPECT_FALSE(Has(plain, "--init"));
  EXPECT_EQ(After(plain, "--save"), f.config.work_dir + "/jobs/j1/model.pt");
  f.settings.resume = true;  // the job folder is there now
  std::filesystem::create_directories(f.dir.path() + "/llama-hf");
  f.settings.job_settings["init"] = "llama-hf";
  f.settings.job_settings["save_format"] = "safetensors";
  EXPECT_EQ(After(args(), "--init"), f.config.work_dir + "/llama-hf");
  EXPECT_EQ(After(args(), "--save"), f.config.work_dir + "/jobs/j1/model.safetensors");
  f.settings.job_settings["init"] = "missing";
  const std::string missing = RefusalOf(f);
  EXPECT_TRUE(Contains(missing, "settings.init")) << "a missing init: " << missing;
  EXPECT_TRUE(Contains(missing, "is not a file or a folder")) << missing;
  f.settings.job_settings["init"] = "llama-hf";
  f.settings.job_settings["save_format"] = "gguf";
  EXPECT_THROW(CheckNodeJob(f.config, f.devices, f.settings), InputError);
}

TEST(NodeJob, RefusesAPlanThatNeedsDevicesTheNodeLacks) {
  Fixture f;
  f.devices.pop_back();  // one emu-slow vanished
  try {
    PrepareNodeJob(f.config, f.devices, f.settings);
    FAIL() << "expected DeviceUnavailable";
  } catch (const DeviceUnavailable& error) {
    EXPECT_TRUE(Contains(error.what(), "2 rank(s) on device type 'emu-slow' of this node, which has 1"));
  }
}

TEST(NodeJob, RefusesBadFields) {
  auto refused = [](auto change) {
    Fixture f;
    change(f.settings);
    EXPECT_THROW(PrepareNodeJob(f.config, f.devices, f.settings), InputError);
  };
  refused([](LaunchSettings& s) { s.job_id = "../evil"; });
  refused([](LaunchSettings& s) { s.node = "c"; });
  refused([](LaunchSettings& s) { s.master_addr = "host; rm -rf /"; });
  refused([](LaunchSettings& s) { s.master_port = 0; });
  refused([](LaunchSettings& s) { s.precision = "fp8"; });
  refused([](LaunchSettings& s) { s.job_settings["lr_decay"] = "step"; });
  refused([](LaunchSettings& s) { s.job_settings["warmup_steps"] = "-1"; });
  refused([](LaunchSettings& s) { s.model_config_json = "not json"; });
  // A model the worker would refuse is refused before any worker starts.
  refused([](LaunchSettings& s) {
    s.model_config_json =
        R"({"arch": "gpt", "n_layer": 1, "n_head": 3, "n_embd": 8, "vocab_size": 256, "block_size": 8})";
  });
  refused([](LaunchSettings& s) { s.plan_json = R"({"stage": 2, "global_batch": 5, "ranks": []})"; });
}

// The stop grace the head sends: unset is the default; more than an hour is refused,
// naming the setting.
TEST(NodeJob, TheStopGraceIsTheRequestsOrTheDefault) {
  Fixture f;
  EXPECT_EQ(StopGrace(f.settings), std::chrono::seconds(30));
  f.settings.job_settings["stop_grace_s"] = "120";
  EXPECT_EQ(StopGrace(f.settings), std::chrono::seconds(120));
  EXPECT_NO_THROW(CheckNodeJob(f.config, f.devices, f.settings));
  f.settings.job_settings["stop_grace_s"] = "3601";
  const std::string refusal = RefusalOf(f);
  EXPECT_TRUE(Contains(refusal, "stop_grace_s")) << "a stop grace over an hour: " << refusal;
  EXPECT_TRUE(Contains(refusal, "from 1 to 3600")) << refusal;
}

TEST(NodeJob, KeepsCheckpointsUnlessAskedToResume) {
  Fixture f;
  std::filesystem::create_directories(f.config.work_dir + "/jobs/j1/checkpoints");
  f.dir.Write("jobs/j1/checkpoints/latest", "step-00000005\n");
  EXPECT_THROW(PrepareNodeJob(f.config, f.devices, f.settings), InputError);
  f.settings.resume = true;
  const auto ranks = PrepareNodeJob(f.config, f.devices, f.settings);
  EXPECT_EQ(After(ranks[0].spec.args, "--resume"), f.config.work_dir + "/jobs/j1/checkpoints");
}

TEST(NodeJob, DevicesInUseAreSkippedAndNamedWhenNoneIsLeft) {
  Fixture f;
  f.devices.push_back(DeviceInfo{"emu-slow", 3, 20 << 20, "", true, {"emu-slow", 1, 1, 2.5, 0, 20 << 20}, {}});
  // emu-slow 1 runs another job: ranks 1 and 2 take emu-slow 2 and 3.
  const auto ranks = PrepareNodeJob(f.config, f.devices, f.settings, {{"emu-slow 1", "job 'other'"}});
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[0].device, "emu-slow 2");
  EXPECT_EQ(ranks[1].device, "emu-slow 3");
  EXPECT_EQ(ranks[2].device, "emu-fast 0");

  f.settings.job_id = "j2";
  try {
    PrepareNodeJob(f.config, f.devices, f.settings, {{"emu-slow 1", "job 'other'"}, {"emu-slow 3", "a profile"}});
    FAIL() << "two emu-slow ranks fit on one free emu-slow";
  } catch (const DeviceUnavailable& error) {
    EXPECT_TRUE(Contains(error.what(), "busy: emu-slow 1 (job 'other'), emu-slow 3 (a profile)")) << error.what();
  }
}

TEST(NodeJob, FindDeviceSkipsDevicesInUseAndNamesTheirHolders) {
  Fixture f;
  EXPECT_EQ(FindDevice(f.devices, "emu-slow", {{"emu-slow 1", "job 'x'"}}).index, 2);
  try {
    FindDevice(f.devices, "emu-fast", {{"emu-fast 0", "job 'x'"}});
    FAIL() << "the only emu-fast is in use";
  } catch (const DeviceUnavailable& error) {
    EXPECT_TRUE(
        Contains(error.what(), "every device of type 'emu-fast' on this node is in use; busy: emu-fast 0 (job 'x')"))
        << error.what();
  }
}

}  // namespace
}  // namespace poplar
