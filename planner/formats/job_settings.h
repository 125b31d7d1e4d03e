// The settings of a training job, each defined once. A setting travels from the cluster
// file's `job:` section (job.<key>) through the head's Launch request
// (LaunchRequest.settings[<key>], as text) and the agent's checks to a flag of every
// rank's `poplar-worker train`. Its row in JobSettingTable() names it, its flag, its
// kind and the values it takes, and every one of those steps is made from the table:
// a new setting is a row here and a member of JobSettings, plus its use in the worker
// (a flag bound by key, launcher/worker/worker_main.cc) or the agent.
//
// An unset setting takes the worker's default: the head sends only what the cluster
// file sets, and the agent passes only what it was sent.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "planner/formats/lr_schedule.h"

namespace poplar {

// One job's settings; an unset one takes the worker's default.
struct JobSettings {
  std::optional<std::string> data;  // token file, relative to each agent's work directory
  std::optional<std::int64_t> steps;
  std::optional<std::string> init;         // initial weights (a file or a Hugging Face folder), as data
  std::optional<std::string> save_format;  // the agent's own: the final weights' file (pt, safetensors)
  std::optional<double> lr, weight_decay, grad_clip;
  std::optional<std::int64_t> warmup_steps;
  std::optional<std::int64_t> seed;  // of the initial parameters, without init
  std::optional<std::string> lr_decay;
  std::optional<std::int64_t> decay_steps;
  std::optional<double> min_lr;
  std::optional<std::int64_t> checkpoint_every, keep_checkpoints;
  std::optional<std::int64_t> stop_grace_s;  // the agent's own (planner/formats/stop_grace.h)
  std::optional<std::string> eval_data;      // as data
  std::optional<std::int64_t> eval_every, eval_samples;
  // Adaptive batch (docs/worker.md, "Adaptive batch"): plan switches may set the global
  // batch from batch_min to batch_max.
  std::optional<std::int64_t> batch_min, batch_max;
  // The head's own (docs/operations.md, "Adaptive batch"): with batch "adaptive", `poplar
  // launch` chooses the global batch within the bounds every batch_every steps.
  std::optional<std::string> batch;
  std::optional<std::int64_t> batch_every;
};

// A whole number from `low` to `high`.
struct CountSetting {
  std::optional<std::int64_t> JobSettings::*member;
  std::int64_t low, high;
};
// A finite number, positive (or zero where `zero_allowed`), at most `most`.
struct NumberSetting {
  std::optional<double> JobSettings::*member;
  bool zero_allowed;
  double most = std::numeric_limits<double>::infinity();
  std::string most_reason = {};  // "at most 1e6 (a larger rate only diverges)"
};
// One of `choices`.
struct ChoiceSetting {
  std::optional<std::string> JobSettings::*member;
  std::vector<std::string> choices;
};
// A file in each agent's work directory: a relative path that stays inside it. The
// agents share no file system with the head; each resolves the path in its work_dir and
// refuses one that leaves it, so the head refuses what no agent could take.
struct WorkFileSetting {
  std::optional<std::string> JobSettings::*member;
  bool folder = false;  // a folder there is taken too (a Hugging Face model folder)
};

struct JobSetting {
  std::string key;   // job.<key> in the cluster file; the request's settings key
  std::string flag;  // the worker's flag; empty: the agent's own setting
  std::variant<CountSetting, NumberSetting, ChoiceSetting, WorkFileSetting> kind;
  std::string what;       // in refusals: "must be <what> from 0 to 2^40"
  std::string help;       // the worker's --help line
  bool required = false;  // a job must set it (the cluster file, a TRAIN request)
  // Another setting this one means nothing without, and why: refused without it.
  std::string needs = {}, needs_reason = {};
};

// Every job setting, in the order the worker's flags are registered and passed.
const std::vector<JobSetting>& JobSettingTable();
// The row of `key`, or null.
const JobSetting* FindJobSetting(const std::string& key);
// The row of `key`; throws std::logic_error for a key of no row (a programming error).
const JobSetting& JobSettingNamed(const std::string& key);

// Why `value` is no value of `kind` ("must be a positive number": the caller adds what
// it got), or nothing. A count's range is checked where it is read.
std::optional<std::string> Refusal(const NumberSetting& kind, double value);
std::optional<std::string> Refusal(const ChoiceSetting& kind, const std::string& value);
std::optional<std::string> Refusal(const WorkFileSetting& kind, const std::string& path);

// The first setting whose `needs` is unset, as (key, reason), or nothing.
std::optional<std::pair<std::string, std::string>> UnmetNeed(const JobSettings& settings);

// The set settings as the request carries them: key -> text, numbers in their shortest
// exact form. ParseJobSettings(JobSettingTexts(s)) == s.
std::map<std::string, std::string> JobSettingTexts(const JobSettings& settings);

// The settings of a request, as untrusted text. Throws InputError(`field`.key, "", reason)
// for a key of no setting, a text that is not exactly a value of its kind, a value out
// of range, one whose `needs` is absent.
JobSettings ParseJobSettings(const std::map<std::string, std::string>& texts, const std::string& field);
// Throws InputError(`field`.key, "", "is required") for a required setting that is unset:
// a training job's data and steps.
void RequireJobSettings(const JobSettings& settings, const std::string& field);

// The worker's flags for the set settings, in table order: flag, value. A work file's
// value is `resolve(key, path)` (the agent's path to it).
std::vector<std::string> WorkerFlags(const JobSettings& settings,
                                     const std::function<std::string(const std::string&, const std::string&)>& resolve);

// What a stopped rank may take to end before its agent SIGKILLs it, in seconds.
int StopGraceSeconds(const JobSettings& settings);

// The learning-rate schedule's settings among them; lr_decay is a valid choice.
LrScheduleSettings ScheduleSettingsOf(const JobSettings& settings);

}  // namespace poplar
