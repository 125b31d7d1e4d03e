#include "agent/node_job.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/work_dir.h"
#include "agent/worker_settings.h"
#include "planner/base/input_error.h"
#include "planner/base/spawner.h"
#include "planner/base/text_file.h"
#include "planner/cluster/emulated_device.h"
#include "planner/formats/job_id.h"
#include "planner/formats/job_settings.h"
#include "planner/formats/precision.h"
#include "planner/formats/train_command.h"
#include "planner/formats/training_limits.h"
#include "planner/formats/worker_plan.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

// <work_dir>/jobs/<job id>: the job's folder on this node.
fs::path JobFolder(const AgentConfig& config, const std::string& job_id) {
  return fs::path(config.work_dir) / "jobs" / job_id;
}

struct NodeRank {
  int rank = 0;
  std::string device_type;
};

// The plan's ranks on `node`, in rank order.
std::vector<NodeRank> RanksOfNode(const WorkerPlan& plan, const std::string& node) {
  std::vector<NodeRank> ranks;
  for (int rank = 0; rank < plan.WorldSize(); ++rank) {
    const RankPlacement& placement = plan.placement[rank];
    if (placement.node.empty() || placement.device_type.empty()) {
      throw InputError("plan_json", "ranks", "every rank needs 'node' and 'device_type' (poplar plan writes them)");
    }
    if (placement.node == node) ranks.push_back({rank, placement.device_type});
  }
  if (ranks.empty()) throw InputError("plan_json", "ranks", "no rank of the plan runs on node '" + node + "'");
  return ranks;
}

void CheckSettings(const LaunchSettings& s) {
  CheckJobId(s.job_id);
  if (s.master_addr.empty() ||
      s.master_addr.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") !=
          std::string::npos) {
    throw InputError("master_addr", "", "must be a host name or address, got '" + s.master_addr + "'");
  }
  if (s.master_port <= 0 || s.master_port > 65535) throw InputError("master_port", "", "must be 1 to 65535");
  ParseWorkerPrecision(s.precision, "precision");
  if (s.timeout_s < 0 || s.timeout_s > 86400) throw InputError("timeout_s", "", "must be 0 to 86400");
  if (s.trace_step < 0 || s.trace_step > kMostJobSteps) {
    throw InputError("trace_step", "", "must be 0 (none) or a step from 1 to " + std::to_string(kMostJobSteps));
  }
  if (s.kind == LaunchSettings::Kind::kNetwork) {
    if (s.resume) throw InputError("resume", "", "a network job measures afresh; it does not resume");
    if (!s.job_settings.empty()) throw InputError("settings", "", "a network job takes none");
    if (s.network_max_bytes != 0 && (s.network_max_bytes < 8192 || s.network_max_bytes > (std::int64_t{1} << 40))) {
      throw InputError("network_max_bytes", "", "must be 0 (the default) or 8192 to 2^40 bytes");
    }
    return;
  }
  RequireModelConfig(s.model_config_json);
}

// A file a setting names (`key`: data, eval_data, init), as a path inside the work
// directory; it must be a file there, or a folder where the setting takes one.
std::string WorkFile(const AgentConfig& config, const std::string& path, const std::string& key) {
  const std::string field = "settings." + key;
  const std::string resolved = ResolveInside(config.work_dir, path, field);
  const bool folder = std::get<WorkFileSetting>(JobSettingNamed(key).kind).folder;
  if (!fs::is_regular_file(resolved) && !(folder && fs::is_directory(resolved))) {
    throw InputError(
        field, "", "'" + path + "' is not a file" + (folder ? " or a folder" : "") + " in the agent's work directory");
  }
  return resolved;
}

// `poplar-worker train` for a rank of this job (without the device's flags); `flags`:
// those of the job's settings (WorkerFlags). `save_format` names the final weights'
// file: model.pt or model.safetensors.
std::vector<std::string> TrainArgs(const LaunchSettings& settings, const fs::path& job_dir, const fs::path& checkpoints,
                                   const std::vector<std::string>& flags, const std::string& save_format,
                                   bool has_checkpoint) {
  const TrainFiles files{(job_dir / "plan.json").string(),
                         (job_dir / "model.json").string(),
                         (job_dir / "metrics" / "rank-{rank}.jsonl").string(),
                         checkpoints.string(),
                         (job_dir / "plans").string(),
                         (job_dir / ("model." + save_format)).string(),
                         (job_dir / "traces" / "rank-{rank}.json").string()};
  return TrainCommand(files, {settings.precision, flags, settings.trace_step, has_checkpoint,
                              settings.require_checkpoint, settings.timeout_s});
}

// `poplar-worker network` for a rank of this job (without the device's flags).
std::vector<std::string> NetworkArgs(const LaunchSettings& settings, const fs::path& job_dir) {
  std::vector<std::string> args = {"network", "--precision", settings.precision, "--metrics",
                                   (job_dir / "metrics" / "rank-{rank}.jsonl").string()};
  if (settings.network_max_bytes > 0) {
    args.insert(args.end(), {"--max-bytes", std::to_string(settings.network_max_bytes)});
  }
  if (settings.timeout_s > 0) args.insert(args.end(), {"--timeout", std::to_string(settings.timeout_s)});
  return args;
}

}  // namespace

void AddDeviceSettings(const DeviceInfo& device, bool training, std::vector<std::string>& args,
                       std::vector<std::string>& env) {
  if (device.emulated) {
    const std::vector<std::string> flags = EmulatedWorkerFlags(device.emulation, 0, training);
    args.insert(args.end(), flags.begin(), flags.end());
    env.push_back("OMP_NUM_THREADS=" + std::to_string(device.emulation.threads));
  } else {
    // NVML numbers GPUs in PCI bus order; make CUDA agree before selecting one.
    env.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    env.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(device.index));
  }
}

std::vector<RankProcess> CheckNodeJob(const AgentConfig& config, const std::vector<DeviceInfo>& devices,
                                      const LaunchSettings& settings, const DeviceHolders& busy) {
  CheckSettings(settings);
  const bool train = settings.kind == LaunchSettings::Kind::kTrain;
  std::vector<std::string> setting_flags;
  std::string save_format = "pt";
  if (train) {
    const JobSettings job = ParseJobSettings(settings.job_settings, "settings");
    RequireJobSettings(job, "settings");
    setting_flags =
        WorkerFlags(job, [&](const std::string& key, const std::string& path) { return WorkFile(config, path, key); });
    save_format = job.save_format.value_or("pt");
  }
  const WorkerPlan plan = ParseWorkerPlan(settings.plan_json, "plan_json");  // full validation
  const std::vector<NodeRank> node_ranks = RanksOfNode(plan, settings.node);

  // Rank -> device: the k-th rank of a type on this node takes the k-th device of it.
  std::map<std::string, std::vector<const DeviceInfo*>> free_devices;
  for (const auto& device : devices) {
    if (Holder(device, busy).empty()) free_devices[device.type].push_back(&device);
  }
  std::vector<const DeviceInfo*> assigned;
  for (const auto& rank : node_ranks) {
    auto& available = free_devices[rank.device_type];
    if (available.empty()) {
      int wanted = 0;
      for (const auto& other : node_ranks) wanted += other.device_type == rank.device_type;
      throw DeviceUnavailable(
          "the plan puts " + std::to_string(wanted) + " rank(s) on device type '" + rank.device_type +
          "' of this node, which has " +
          std::to_string(std::count_if(devices.begin(), devices.end(),
                                       [&](const DeviceInfo& d) { return d.type == rank.device_type; })) +
          BusyNote(devices, rank.device_type, busy));
    }
    assigned.push_back(available.front());
    available.erase(available.begin());
  }

  const fs::path job_dir = JobFolder(config, settings.job_id);
  const fs::path checkpoints = CheckpointFolder(config, settings.job_id);
  const bool has_checkpoint = fs::exists(checkpoints / "latest");
  if (has_checkpoint && !settings.resume) {
    throw InputError("job_id", "",
                     "job '" + settings.job_id + "' already has checkpoints on this node; " +
                         (train ? "resume it or choose another job id" : "choose another job id"));
  }
  std::vector<RankProcess> processes;
  for (std::size_t local = 0; local < node_ranks.size(); ++local) {
    const int rank = node_ranks[local].rank;
    RankProcess process;
    process.rank = rank;
    process.device = DeviceKey(*assigned[local]);
    process.metrics_path = (job_dir / "metrics" / ("rank-" + std::to_string(rank) + ".jsonl")).string();
    process.log_path = (job_dir / "logs" / ("rank-" + std::to_string(rank) + ".log")).string();
    SpawnSpec& spec = process.spec;
    spec.program = config.worker;
    spec.cwd = job_dir.string();
    spec.args = train ? TrainArgs(settings, job_dir, checkpoints, setting_flags, save_format, has_checkpoint)
                      : NetworkArgs(settings, job_dir);
    spec.args.insert(spec.args.end(), {"--device", assigned[local]->emulated ? "cpu" : "cuda"});
    spec.env = InheritedEnvironment();
    spec.env.insert(spec.env.end(),
                    {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(plan.WorldSize()),
                     "LOCAL_RANK=" + std::to_string(local), "LOCAL_WORLD_SIZE=" + std::to_string(node_ranks.size()),
                     "MASTER_ADDR=" + settings.master_addr, "MASTER_PORT=" + std::to_string(settings.master_port)});
    AddDeviceSettings(*assigned[local], train, spec.args, spec.env);
    processes.push_back(std::move(process));
  }
  return processes;
}

std::vector<RankProcess> PrepareNodeJob(const AgentConfig& config, const std::vector<DeviceInfo>& devices,
                                        const LaunchSettings& settings, const DeviceHolders& busy) {
  std::vector<RankProcess> processes = CheckNodeJob(config, devices, settings, busy);
  const fs::path job_dir = JobFolder(config, settings.job_id);
  fs::create_directories(job_dir / "logs");
  fs::create_directories(job_dir / "metrics");
  if (settings.kind == LaunchSettings::Kind::kTrain && settings.trace_step > 0) {
    fs::create_directories(job_dir / "traces");
  }
  WriteFileAtomically((job_dir / "plan.json").string(), settings.plan_json);
  if (settings.kind == LaunchSettings::Kind::kTrain) {
    WriteFileAtomically((job_dir / "model.json").string(), settings.model_config_json);
    // Plan switches are numbered per launch: an earlier launch's are not this one's.
    fs::remove_all(job_dir / "plans");
    fs::create_directories(job_dir / "plans");
  }
  if (!settings.resume) {
    std::error_code ignored;
    for (const RankProcess& process : processes) fs::remove(process.metrics_path, ignored);
  }
  return processes;
}

fs::path CheckpointFolder(const AgentConfig& config, const std::string& job_id) {
  CheckJobId(job_id);  // a plain name: the folder is inside jobs/
  if (config.shared_dir.empty()) return JobFolder(config, job_id) / "checkpoints";
  return fs::path(config.shared_dir) / "jobs" / job_id / "checkpoints";
}

std::string WritePlanSwitch(const AgentConfig& config, const std::string& job_id, const std::string& plan_json,
                            int number, const std::string& reason, const JobSettings& settings) {
  const fs::path job_dir = JobFolder(config, job_id);
  return HandPlanSwitch((job_dir / "plans").string(), number, LoadWorkerPlan((job_dir / "plan.json").string()),
                        plan_json, reason, "plan_json", settings.batch_min.value_or(0), settings.batch_max.value_or(0));
}

std::chrono::seconds StopGrace(const LaunchSettings& settings) {
  return std::chrono::seconds(StopGraceSeconds(ParseJobSettings(settings.job_settings, "settings")));
}

void RemoveJobFolder(const AgentConfig& config, const std::string& job_id) {
  CheckJobId(job_id);  // a plain name: the folder is inside jobs/
  std::error_code ignored;
  fs::remove_all(JobFolder(config, job_id), ignored);
}

}  // namespace poplar
