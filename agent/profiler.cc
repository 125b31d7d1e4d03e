#include "agent/profiler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>

#include "agent/job.h"
#include "agent/node_job.h"
#include "agent/worker_settings.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/text_file.h"
#include "planner/formats/precision.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

void CheckSettings(const ProfileSettings& settings) {
  RequireModelConfig(settings.model_config_json);
  for (int stage : settings.stages) {
    if (stage < 0 || stage > 3)
      throw InputError("stages", "", "each stage must be 0 to 3, got " + std::to_string(stage));
  }
  ParseWorkerPrecision(settings.precision, "precision");
  if (settings.repeats < 0 || settings.repeats > 100) throw InputError("repeats", "", "must be 0 to 100");
  if (settings.largest_micro_batch < 0 || settings.largest_micro_batch > (1 << 20)) {
    throw InputError("largest_micro_batch", "", "must be 0 to 1048576");
  }
}

// The requested stages, sorted, once each (all four when none is named).
std::vector<int> RequestedStages(const ProfileSettings& settings) {
  std::vector<int> stages = settings.stages.empty() ? std::vector<int>{0, 1, 2, 3} : settings.stages;
  std::sort(stages.begin(), stages.end());
  stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  return stages;
}

// The worker executable as it is now (size and modification time): a rebuilt or
// replaced worker measures afresh even when its --version text is unchanged.
std::string WorkerFileStamp(const std::string& worker) {
  struct stat status {};
  if (::stat(worker.c_str(), &status) != 0) return "unreadable";
  return std::to_string(status.st_size) + "@" + std::to_string(status.st_mtim.tv_sec) + "." +
         std::to_string(status.st_mtim.tv_nsec);
}

}  // namespace

std::string StableHash(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

Profiler::Profiler(const AgentConfig& config, std::string worker_version, Spawner& spawner)
    : config_(config), worker_version_(std::move(worker_version)), spawner_(spawner) {
  RemoveTemporariesOfStoppedAgents(CacheFolder());
}

void RemoveTemporariesOfStoppedAgents(const std::filesystem::path& folder) {
  // MeasureStages' "<type>-stages<list>.<pid>-<n>.model.json" and ".partial.json", and
  // WriteFileAtomically's "<file>.tmp.<pid>": each names the agent that wrote it.
  static const std::regex kTemporary(
      R"(.+\.([1-9][0-9]{0,8})-[0-9]+\.(?:model|partial)\.json|.+\.tmp\.([1-9][0-9]{0,8}))");
  std::error_code error;
  for (const fs::path& entry : FolderEntries(folder)) {
    std::smatch match;
    const std::string name = entry.filename().string();
    if (!std::regex_match(name, match, kTemporary)) continue;
    if (ProcessIsGone(std::stol(match[1].matched ? match[1].str() : match[2].str()))) fs::remove(entry, error);
  }
}

std::string Profiler::Run(const ProfileSettings& settings, const DeviceInfo& device, const ProgressFn& progress,
                          const ClaimDeviceFn& claim) {
  CheckSettings(settings);
  const std::vector<int> stages = RequestedStages(settings);

  fs::create_directories(CacheFolder());
  std::map<int, nlohmann::json> parts;  // each stage's profile, by stage
  std::vector<int> missing;
  for (int stage : stages) {
    const fs::path cached = CachePath(settings, device, stage);
    if (!fs::exists(cached)) {
      missing.push_back(stage);
      continue;
    }
    if (!progress("stage " + std::to_string(stage) + ": cached (" + cached.filename().string() + ")", true)) {
      throw std::runtime_error("profiling cancelled by the caller");
    }
    parts[stage] = nlohmann::json::parse(ReadTextFile(cached.string()));
  }
  if (!missing.empty()) {
    // One worker measures every missing stage, interleaving them (launcher/worker/profile_mode.h);
    // each stage is then cached on its own, whole or not at all.
    const DeviceInfo measured_on = claim ? claim() : device;
    const nlohmann::json measured = nlohmann::json::parse(MeasureStages(settings, measured_on, missing, progress));
    for (const nlohmann::json& entry : measured.at("stages")) {
      const int stage = entry.at("stage").get<int>();
      nlohmann::json part = measured;
      part["stages"] = nlohmann::json::array({entry});
      const fs::path cache = CachePath(settings, device, stage);
      WriteFileAtomically(cache.string(), part.dump(2) + "\n");
      parts[stage] = std::move(part);
      progress("stage " + std::to_string(stage) + ": measured, cached (" + cache.filename().string() + ")", false);
    }
  }
  nlohmann::json merged;
  for (auto& [stage, part] : parts) {  // std::map: in stage order
    if (merged.is_null()) {
      merged = part;
    } else {
      merged["stages"].push_back(part.at("stages").at(0));
    }
  }
  return merged.dump(2) + "\n";
}

std::filesystem::path Profiler::CacheFolder() const { return fs::path(config_.cache_dir) / "profiles"; }

std::filesystem::path Profiler::CachePath(const ProfileSettings& settings, const DeviceInfo& device, int stage) const {
  const std::string model = nlohmann::json::parse(settings.model_config_json).dump();  // canonical key order
  const nlohmann::json key = {{"model", model},
                              {"device_type", device.type},
                              {"memory_bytes", device.memory_bytes},
                              {"threads", device.emulation.threads},
                              {"slowdown", device.emulation.slowdown},
                              {"gflops", device.emulation.gflops},
                              {"cpus", device.emulation.cpus},
                              {"emulated", device.emulated},
                              {"worker", worker_version_},
                              {"worker_file", WorkerFileStamp(config_.worker)},
                              {"precision", settings.precision},
                              {"repeats", settings.repeats},
                              {"largest_micro_batch", settings.largest_micro_batch},
                              {"stage", stage}};
  return CacheFolder() / (device.type + "-stage" + std::to_string(stage) + "-" + StableHash(key.dump()) + ".json");
}

std::string Profiler::MeasureStages(const ProfileSettings& settings, const DeviceInfo& device,
                                    const std::vector<int>& stages, const ProgressFn& progress) {
  const std::string names = Join(stages, ",", [](int stage) { return std::to_string(stage); });
  const std::string what = (stages.size() == 1 ? "stage " : "stages ") + names;
  if (!progress(what + ": measuring on " + device.type, false)) {
    throw std::runtime_error("profiling cancelled by the caller");
  }

  // Private names per measurement, so concurrent requests for one device do not collide.
  const fs::path folder = CacheFolder();
  const std::string stem = device.type + "-stages" + names;
  static std::atomic<int> measurement{0};
  const std::string unique = stem + "." + std::to_string(getpid()) + "-" + std::to_string(++measurement);
  const fs::path model_file = folder / (unique + ".model.json");
  const fs::path output = folder / (unique + ".partial.json");
  WriteFileAtomically(model_file.string(), nlohmann::json::parse(settings.model_config_json).dump());
  RankProcess process;
  process.log_path = (folder / (stem + ".log")).string();
  SpawnSpec& spec = process.spec;
  spec.program = config_.worker;
  spec.cwd = folder.string();
  spec.args = {"profile",
               "--model-config",
               model_file.string(),
               "--device-type",
               device.type,
               "--device",
               device.emulated ? "cpu" : "cuda",
               "-o",
               output.string(),
               "--precision",
               settings.precision};
  for (int stage : stages) spec.args.insert(spec.args.end(), {"--stage", std::to_string(stage)});
  if (settings.repeats > 0) spec.args.insert(spec.args.end(), {"--repeats", std::to_string(settings.repeats)});
  if (settings.largest_micro_batch > 0) {
    spec.args.insert(spec.args.end(), {"--largest-micro-batch", std::to_string(settings.largest_micro_batch)});
  }
  spec.env = InheritedEnvironment();
  AddDeviceSettings(device, /*training=*/false, spec.args, spec.env);

  Job job("profile-" + stem, {process}, std::chrono::seconds(2));
  job.Start(spawner_);
  JobEvent event;
  std::string failure;
  for (;;) {
    if (!job.Next(&event, std::chrono::milliseconds(200))) {                    // the final event ends the loop
      if (!progress("", false)) job.Stop("profiling cancelled by the caller");  // liveness check
      continue;
    }
    // The worker's line naming its private output file ("wrote ...partial.json") is left
    // out: that file is read and removed here; Run reports the cache files instead.
    const bool private_file = event.text.find(output.filename().string()) != std::string::npos;
    if (event.kind == JobEvent::Kind::kOutput && !private_file && !progress(event.text, false)) {
      job.Stop("profiling cancelled by the caller");
    }
    if (event.kind == JobEvent::Kind::kFailed) failure = event.text;
    if (event.kind == JobEvent::Kind::kFinished || event.kind == JobEvent::Kind::kFailed) break;
  }
  std::error_code ignored;
  fs::remove(model_file, ignored);
  const std::string profile = failure.empty() ? ReadTextFile(output.string()) : "";
  fs::remove(output, ignored);
  if (!failure.empty()) {
    throw std::runtime_error("profiling " + what + " of " + device.type + " failed: " + failure);
  }
  return profile;
}

}  // namespace poplar
