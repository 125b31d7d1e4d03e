#include "planner/formats/job_settings.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "planner/base/input_error.h"

namespace poplar {
namespace {

// A valid text of every setting: the request of a job that sets them all.
std::map<std::string, std::string> EverySettingSet() {
  return {{"data", "tokens.bin"},
          {"steps", "100"},
          {"lr", "0.0003"},
          {"weight_decay", "0"},
          {"grad_clip", "1.5"},
          {"warmup_steps", "10"},
          {"lr_decay", "cosine"},
          {"decay_steps", "90"},
          {"min_lr", "3e-05"},
          {"checkpoint_every", "25"},
          {"keep_checkpoints", "2"},
          {"stop_grace_s", "120"},
          {"eval_data", "valid.bin"},
          {"eval_every", "5"},
          {"eval_samples", "64"},
          {"init", "llama-hf"},
          {"save_format", "safetensors"},
          {"batch_min", "8"},
          {"batch_max", "64"},
          {"batch", "adaptive"},
          {"batch_every", "25"},
          {"seed", "42"}};
}

std::string RefusalOf(const std::map<std::string, std::string>& texts) {
  try {
    ParseJobSettings(texts, "settings");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(JobSettings, EveryRowHasAUniqueKeyAndFlag) {
  std::set<std::string> keys, flags;
  for (const JobSetting& setting : JobSettingTable()) {
    EXPECT_TRUE(keys.insert(setting.key).second) << setting.key;
    if (!setting.flag.empty()) EXPECT_TRUE(flags.insert(setting.flag).second) << setting.flag;
    if (!setting.needs.empty()) EXPECT_NO_THROW(JobSettingNamed(setting.needs)) << setting.key;
  }
  EXPECT_EQ(keys.size(), EverySettingSet().size()) << "a setting the tests here do not set";
  EXPECT_THROW(JobSettingNamed("epochs"), std::logic_error);
}

// What the head sends is what the agent reads back, every setting and every digit.
TEST(JobSettings, TextsReadBackAsTheSameSettings) {
  const std::map<std::string, std::string> texts = EverySettingSet();
  const JobSettings settings = ParseJobSettings(texts, "settings");
  const std::map<std::string, std::string> sent = JobSettingTexts(settings);
  EXPECT_EQ(sent.size(), texts.size());
  EXPECT_EQ(JobSettingTexts(ParseJobSettings(sent, "settings")), sent);
  EXPECT_EQ(settings.lr, 0.0003);
  EXPECT_EQ(settings.steps, 100);
  EXPECT_EQ(settings.weight_decay, 0.0);  // a value, not unset
  EXPECT_EQ(settings.eval_data, "valid.bin");
  JobSettings exact;
  exact.lr = 0.1 + 0.2;  // not 0.3: the shortest text that reads back exactly
  EXPECT_EQ(ParseJobSettings(JobSettingTexts(exact), "settings").lr, exact.lr);
  EXPECT_TRUE(JobSettingTexts(JobSettings()).empty());  // unset: not sent
}

// The worker's flags, in table order, for what is set; files through the agent's resolver.
TEST(JobSettings, WorkerFlagsPassWhatIsSet) {
  JobSettings settings;
  settings.data = "tokens.bin";
  settings.steps = 7;
  settings.min_lr = 0;
  settings.stop_grace_s = 60;  // the agent's own: no flag
  const auto flags = WorkerFlags(
      settings, [](const std::string& key, const std::string& path) { return "/work/" + key + "/" + path; });
  EXPECT_EQ(flags, (std::vector<std::string>{"--data", "/work/data/tokens.bin", "--steps", "7", "--min-lr", "0"}));
}

// A request is untrusted text: a key of no setting, a value that is not exactly one of
// its kind, out of its range, or without what it needs is refused, naming the key.
TEST(JobSettings, RefusesBadTextsNamingTheSetting) {
  const auto with = [](const std::string& key, const std::string& text) {
    auto texts = EverySettingSet();
    texts[key] = text;
    return texts;
  };
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {with("epochs", "3"), "settings.epochs: is no job setting this agent knows (data, steps,"},
      {with("steps", "0"), "settings.steps: must be a number of optimizer steps from 1 to 1099511627776, got '0'"},
      {with("steps", "1e3"), "settings.steps: must be a number of optimizer steps from 1"},
      {with("steps", " 5"), "settings.steps:"},
      {with("steps", ""), "settings.steps:"},
      {with("eval_samples", "99999999999999999999"), "settings.eval_samples: must be a number of samples"},
      {with("lr", "nan"), "settings.lr: must be a finite number, got 'nan'"},
      {with("lr", "inf"), "settings.lr: must be a finite number"},
      {with("lr", "0"), "settings.lr: must be a positive number, got '0'"},
      {with("lr", "1e38"), "settings.lr: must be at most 1e6 (a larger rate only diverges), got '1e38'"},
      {with("lr", "0.1x"), "settings.lr: must be a number, got '0.1x'"},
      {with("grad_clip", "-1"), "settings.grad_clip: must be zero or more, got '-1'"},
      {with("lr_decay", "step"), "settings.lr_decay: must be constant, cosine or linear, got 'step'"},
      {with("data", "/etc/passwd"), "settings.data: must be relative to each agent's work_dir"},
      {with("eval_data", "a/../../x"), "settings.eval_data: must name a file inside each agent's work_dir"},
      {with("stop_grace_s", "3601"), "settings.stop_grace_s: must be a number of seconds"},
      {with("lr_decay", "cos\x85ine"), "got 'cos\\x85ine'"},
      {with("save_format", "gguf"), "settings.save_format: must be pt or safetensors, got 'gguf'"},
      {with("init", "../weights"), "settings.init: must name a file inside each agent's work_dir"},
  };
  for (const auto& [texts, expected] : cases) {
    const std::string refusal = RefusalOf(texts);
    EXPECT_NE(refusal.find(expected), std::string::npos) << "expected '" << expected << "', got '" << refusal << "'";
  }
  auto without_file = EverySettingSet();
  without_file.erase("eval_data");
  EXPECT_EQ(RefusalOf(without_file), "settings.eval_every: is for an evaluation: add eval_data");
  auto without_steps = EverySettingSet();
  without_steps.erase("steps");
  const JobSettings parsed = ParseJobSettings(without_steps, "settings");  // required by a training job only
  EXPECT_THROW(RequireJobSettings(parsed, "settings"), InputError);
  EXPECT_NO_THROW(RequireJobSettings(ParseJobSettings(EverySettingSet(), "settings"), "settings"));
}

TEST(JobSettings, TheScheduleAndTheStopGraceOfTheSettings) {
  const JobSettings settings = ParseJobSettings(EverySettingSet(), "settings");
  const LrScheduleSettings schedule = ScheduleSettingsOf(settings);
  EXPECT_EQ(schedule.warmup_steps, 10);
  EXPECT_EQ(schedule.decay, LrDecay::kCosine);
  EXPECT_EQ(schedule.decay_steps, 90);
  EXPECT_EQ(schedule.min_lr, 3e-05);
  EXPECT_EQ(StopGraceSeconds(settings), 120);
  EXPECT_EQ(StopGraceSeconds(JobSettings()), 30);
  EXPECT_EQ(ScheduleSettingsOf(JobSettings()).decay, LrDecay::kConstant);
}

}  // namespace
}  // namespace poplar
