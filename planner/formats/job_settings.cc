#include "planner/formats/job_settings.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/number_text.h"
#include "planner/base/range_text.h"
#include "planner/formats/stop_grace.h"
#include "planner/formats/training_limits.h"
#include "planner/formats/worker_plan.h"

namespace poplar {
namespace {

constexpr char kSteps[] = "a number of steps";

std::vector<JobSetting> MakeTable() {
  using S = JobSettings;
  return {
      {"data", "--data", WorkFileSetting{&S::data}, "", "Token file (uint16, poplar prepare-data)", true},
      {"steps", "--steps", CountSetting{&S::steps, 1, kMostJobSteps}, "a number of optimizer steps",
       "Train until this many optimizer steps are done", true},
      {"init", "--init", WorkFileSetting{&S::init, true}, "",
       "Initial weights: a torch.save(dict) state dict, a .safetensors file or a Hugging Face model folder"},
      {"save_format", "", ChoiceSetting{&S::save_format, {"pt", "safetensors"}}, "", ""},
      // libtorch's CPU generator keeps 32 bits of a seed: 2^32 + 1 would initialise as 1 does.
      {"seed", "--seed", CountSetting{&S::seed, 0, (std::int64_t{1} << 32) - 1}, "a seed",
       "Seed of the initial parameters when there is no --init"},
      {"lr", "--lr", NumberSetting{&S::lr, false, kMostLearningRate, "at most 1e6 (a larger rate only diverges)"}, "",
       "AdamW learning rate, at most 1e6"},
      {"weight_decay", "--weight-decay", NumberSetting{&S::weight_decay, true}, "",
       "Decoupled weight decay (2+-dimensional parameters)"},
      {"grad_clip", "--grad-clip", NumberSetting{&S::grad_clip, true}, "",
       "Clip the global gradient norm to this (0: off)"},
      {"warmup_steps", "--warmup-steps", CountSetting{&S::warmup_steps, 0, kMostJobSteps}, kSteps,
       "Raise the learning rate linearly to --lr over these steps"},
      {"lr_decay", "--lr-decay",
       ChoiceSetting{&S::lr_decay,
                     {LrDecayName(LrDecay::kConstant), LrDecayName(LrDecay::kCosine), LrDecayName(LrDecay::kLinear)}},
       "", "After the warm-up: constant, or decay to --min-lr by a cosine or a line"},
      {"decay_steps", "--decay-steps", CountSetting{&S::decay_steps, 1, kMostJobSteps}, kSteps,
       "The decay reaches --min-lr after this step (default: --steps)"},
      {"min_lr", "--min-lr", NumberSetting{&S::min_lr, true}, "", "The decay's floor (default: --lr / 10)"},
      {"checkpoint_every", "--checkpoint-every", CountSetting{&S::checkpoint_every, 0, kMostJobSteps},
       "a number of steps (0: only at the end)", "Checkpoint every N steps"},
      {"keep_checkpoints", "--keep-checkpoints", CountSetting{&S::keep_checkpoints, 0, 1'000'000},
       "a number of checkpoints (0: every one)", "Keep the N newest checkpoints, removing older ones (0: every one)"},
      {"stop_grace_s", "", CountSetting{&S::stop_grace_s, 1, kMostStopGraceSeconds},
       "a number of seconds a stopped rank may take to end", ""},
      {"eval_data", "--eval-data", WorkFileSetting{&S::eval_data}, "",
       "Held-out token file: its mean loss is evaluated (val_loss)"},
      {"eval_every", "--eval-every", CountSetting{&S::eval_every, 0, kMostJobSteps},
       "a number of steps (0: after the last only)", "Evaluate every N steps (0: only after the last step)", false,
       "eval_data", "is for an evaluation"},
      {"eval_samples", "--eval-samples", CountSetting{&S::eval_samples, 0, std::int64_t{1} << 40},
       "a number of samples (0: every one)", "Evaluate the first N samples of --eval-data (0: every one)", false,
       "eval_data", "is for an evaluation"},
      {"batch_min", "--batch-min", CountSetting{&S::batch_min, 1, kMostGlobalBatch}, "a number of samples",
       "Adaptive batch: a plan switch may set the global batch from this (with --batch-max)"},
      {"batch_max", "--batch-max", CountSetting{&S::batch_max, 1, kMostGlobalBatch}, "a number of samples",
       "Adaptive batch: a plan switch may set the global batch up to this (with --batch-min)", false, "batch_min",
       "is the adaptive batch's bound, with batch_min"},
      {"batch", "", ChoiceSetting{&S::batch, {"fixed", "adaptive"}}, "", "", false, "batch_max",
       "is chosen within the bounds batch_min and batch_max"},
      {"batch_every", "", CountSetting{&S::batch_every, 1, kMostJobSteps}, "a number of steps", "", false, "batch",
       "is how often an adaptive batch is chosen"},
  };
}

// "constant, cosine or linear".
std::string OneOf(const std::vector<std::string>& choices) {
  if (choices.size() < 2) return Join(choices, "");
  return Join(std::vector<std::string>(choices.begin(), choices.end() - 1), ", ") + " or " + choices.back();
}

// Whether `setting` holds a value in `settings`.
bool IsSet(const JobSetting& setting, const JobSettings& settings) {
  return std::visit([&](const auto& kind) { return (settings.*kind.member).has_value(); }, setting.kind);
}

}  // namespace

const std::vector<JobSetting>& JobSettingTable() {
  static const std::vector<JobSetting> table = MakeTable();
  return table;
}

const JobSetting* FindJobSetting(const std::string& key) {
  for (const JobSetting& setting : JobSettingTable()) {
    if (setting.key == key) return &setting;
  }
  return nullptr;
}

const JobSetting& JobSettingNamed(const std::string& key) {
  const JobSetting* setting = FindJobSetting(key);
  if (setting == nullptr) throw std::logic_error("no job setting named '" + key + "'");
  return *setting;
}

std::optional<std::string> Refusal(const NumberSetting& kind, double value) {
  if (!(value > 0 || (kind.zero_allowed && value == 0))) {
    return kind.zero_allowed ? "must be zero or more" : "must be a positive number";
  }
  if (value > kind.most) return "must be " + kind.most_reason;
  return std::nullopt;
}

std::optional<std::string> Refusal(const ChoiceSetting& kind, const std::string& value) {
  for (const std::string& choice : kind.choices) {
    if (value == choice) return std::nullopt;
  }
  return "must be " + OneOf(kind.choices);
}

std::optional<std::string> Refusal(const WorkFileSetting&, const std::string& path) {
  if (std::filesystem::path(path).is_absolute()) {
    return "must be relative to each agent's work_dir (where the agent looks for it)";
  }
  const std::filesystem::path normal = std::filesystem::path(path).lexically_normal();
  if (normal.empty() || normal == "." || *normal.begin() == "..")
    return "must name a file inside each agent's work_dir";
  return std::nullopt;
}

std::optional<std::pair<std::string, std::string>> UnmetNeed(const JobSettings& settings) {
  for (const JobSetting& setting : JobSettingTable()) {
    if (!setting.needs.empty() && IsSet(setting, settings) && !IsSet(JobSettingNamed(setting.needs), settings)) {
      return std::make_pair(setting.key, setting.needs_reason + ": add " + setting.needs);
    }
  }
  return std::nullopt;
}

std::map<std::string, std::string> JobSettingTexts(const JobSettings& settings) {
  std::map<std::string, std::string> texts;
  for (const JobSetting& setting : JobSettingTable()) {
    std::visit(
        [&](const auto& kind) {
          const auto& value = settings.*kind.member;
          if (!value) return;
          using Value = std::decay_t<decltype(*value)>;
          if constexpr (std::is_same_v<Value, std::int64_t>) {
            texts[setting.key] = std::to_string(*value);
          } else if constexpr (std::is_same_v<Value, double>) {
            texts[setting.key] = ShortestText(*value);
          } else {
            texts[setting.key] = *value;
          }
        },
        setting.kind);
  }
  return texts;
}

JobSettings ParseJobSettings(const std::map<std::string, std::string>& texts, const std::string& field) {
  JobSettings settings;
  for (const auto& entry : texts) {
    const std::string& key = entry.first;  // named, not bound: lambdas below capture them
    const std::string& text = entry.second;
    const JobSetting* found = FindJobSetting(key);
    if (found == nullptr) {
      throw InputError(field + "." + Printable(key), "",
                       "is no job setting this agent knows (" +
                           Join(JobSettingTable(), ", ", [](const JobSetting& s) { return s.key; }) + ")");
    }
    const JobSetting& setting = *found;
    const auto refuse = [&](const std::string& reason) {
      throw InputError(field + "." + key, "", reason + ", got '" + Printable(text) + "'");
    };
    std::visit(
        [&](const auto& kind) {
          using Kind = std::decay_t<decltype(kind)>;
          const char* const end = text.data() + text.size();
          if constexpr (std::is_same_v<Kind, CountSetting>) {
            std::int64_t value = 0;
            const auto [stop, error] = std::from_chars(text.data(), end, value);
            if (text.empty() || error != std::errc() || stop != end || value < kind.low || value > kind.high) {
              refuse(WholeNumberRangeReason(setting.what, kind.low, kind.high));
            }
            settings.*kind.member = value;
          } else if constexpr (std::is_same_v<Kind, NumberSetting>) {
            double value = 0;
            const auto [stop, error] = std::from_chars(text.data(), end, value);
            if (text.empty() || error != std::errc() || stop != end) refuse("must be a number");
            if (!std::isfinite(value)) refuse("must be a finite number");
            if (const auto refused = Refusal(kind, value)) refuse(*refused);
            settings.*kind.member = value;
          } else {
            if (const auto refused = Refusal(kind, text)) refuse(*refused);
            settings.*kind.member = text;
          }
        },
        setting.kind);
  }
  if (const auto unmet = UnmetNeed(settings)) throw InputError(field + "." + unmet->first, "", unmet->second);
  return settings;
}

std::vector<std::string> WorkerFlags(
    const JobSettings& settings, const std::function<std::string(const std::string&, const std::string&)>& resolve) {
  const std::map<std::string, std::string> texts = JobSettingTexts(settings);
  std::vector<std::string> flags;
  for (const JobSetting& setting : JobSettingTable()) {
    const auto text = texts.find(setting.key);
    if (setting.flag.empty() || text == texts.end()) continue;
    const bool file = std::holds_alternative<WorkFileSetting>(setting.kind);
    flags.insert(flags.end(), {setting.flag, file ? resolve(setting.key, text->second) : text->second});
  }
  return flags;
}

void RequireJobSettings(const JobSettings& settings, const std::string& field) {
  for (const JobSetting& setting : JobSettingTable()) {
    if (setting.required && !IsSet(setting, settings)) throw InputError(field + "." + setting.key, "", "is required");
  }
}

int StopGraceSeconds(const JobSettings& settings) {
  return static_cast<int>(settings.stop_grace_s.value_or(kDefaultStopGraceSeconds));
}

LrScheduleSettings ScheduleSettingsOf(const JobSettings& settings) {
  LrScheduleSettings schedule;
  schedule.warmup_steps = settings.warmup_steps.value_or(0);
  if (settings.lr_decay) schedule.decay = LrDecayNamed(*settings.lr_decay).value_or(LrDecay::kConstant);
  schedule.decay_steps = settings.decay_steps;
  schedule.min_lr = settings.min_lr;
  return schedule;
}

}  // namespace poplar
