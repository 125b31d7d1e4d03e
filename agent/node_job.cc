#include "agent/node_job.h"

#include <charconv>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/spawner.h"
#include "agent/work_dir.h"
#include "agent/worker_settings.h"
#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/formats/job_id.h"
#include "planner/formats/lr_schedule.h"
#include "planner/formats/precision.h"
#include "planner/formats/stop_grace.h"
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
  if (s.stop_grace_s < 0 || s.stop_grace_s > kMostStopGraceSeconds) {
    throw InputError("stop_grace_s", "",
                     "must be 0 (the default, " + std::to_string(kDefaultStopGraceSeconds) + " s) to " +
                         std::to_string(kMostStopGraceSeconds) + " seconds");
  }
  if (s.kind == LaunchSettings::Kind::kNetwork) {
    if (s.resume) throw InputError("resume", "", "a network job measures afresh; it does not resume");
    if (s.network_max_bytes != 0 && (s.network_max_bytes < 8192 || s.network_max_bytes > (std::int64_t{1} << 40))) {
      throw InputError("network_max_bytes", "", "must be 0 (the default) or 8192 to 2^40 bytes");
    }
    return;
  }
  if (s.steps <= 0) throw InputError("steps", "", "must be a positive number of steps");
  if (s.lr && !(*s.lr > 0)) throw InputError("lr", "", "must be positive");
  if (s.weight_decay && !(*s.weight_decay >= 0)) throw InputError("weight_decay", "", "must be zero or positive");
  if (s.grad_clip && !(*s.grad_clip >= 0)) throw InputError("grad_clip", "", "must be zero or positive");
  if (s.warmup_steps < 0) throw InputError("warmup_steps", "", "must be zero or positive");
  if (!s.lr_decay.empty() && !LrDecayNamed(s.lr_decay)) {
    throw InputError("lr_decay", "", "must be constant, cosine or linear, got '" + s.lr_decay + "'");
  }
  if (s.decay_steps < 0) throw InputError("decay_steps", "", "must be zero or positive");
  if (s.min_lr && !(*s.min_lr >= 0)) throw InputError("min_lr", "", "must be zero or positive");
  if (s.checkpoint_every < 0) throw InputError("checkpoint_every", "", "must be zero or positive");
  if (s.keep_checkpoints < 0) throw InputError("keep_checkpoints", "", "must be zero or positive");
  if (s.eval_every < 0) throw InputError("eval_every", "", "must be zero or positive");
  if (s.eval_samples < 0) throw InputError("eval_samples", "", "must be zero or positive");
  if (s.eval_data_path.empty() && (s.eval_every != 0 || s.eval_samples != 0)) {
    throw InputError(s.eval_every != 0 ? "eval_every" : "eval_samples", "", "is for an evaluation: set eval_data_path");
  }
  if (s.trace_step < 0 || s.trace_step > kMostJobSteps) {
    throw InputError("trace_step", "", "must be 0 (none) or a step from 1 to " + std::to_string(kMostJobSteps));
  }
  RequireModelConfig(s.model_config_json);
}

// The shortest text that reads back as exactly `value`.
std::string Number(double value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

// A token file the request names (`field`: data_path or eval_data_path), as a path
// inside the work directory; it must be a file there.
std::string TokenFile(const AgentConfig& config, const std::string& path, const std::string& field) {
  const std::string resolved = ResolveInside(config.work_dir, path, field);
  if (!fs::is_regular_file(resolved)) {
    throw InputError(field, "", "'" + path + "' is not a file in the agent's work directory");
  }
  return resolved;
}

// `poplar-worker train` for a rank of this job (without the device's flags); `data` and
// `eval_data` (empty: none) resolved (TokenFile).
std::vector<std::string> TrainArgs(const LaunchSettings& settings, const fs::path& job_dir, const std::string& data,
                                   const std::string& eval_data, bool has_checkpoint) {
  const fs::path checkpoints = job_dir / "checkpoints";
  std::vector<std::string> args = {"train",
                                   "--plan",
                                   (job_dir / "plan.json").string(),
                                   "--model-config",
                                   (job_dir / "model.json").string(),
                                   "--data",
                                   data,
                                   "--steps",
                                   std::to_string(settings.steps),
                                   "--precision",
                                   settings.precision,
                                   "--metrics",
                                   (job_dir / "metrics" / "rank-{rank}.jsonl").string(),
                                   "--checkpoint-dir",
                                   checkpoints.string(),
                                   "--checkpoint-every",
                                   std::to_string(settings.checkpoint_every),
                                   "--keep-checkpoints",
                                   std::to_string(settings.keep_checkpoints),
                                   "--save",
                                   (job_dir / "model.pt").string()};
  if (settings.lr) args.insert(args.end(), {"--lr", Number(*settings.lr)});
  if (settings.weight_decay) args.insert(args.end(), {"--weight-decay", Number(*settings.weight_decay)});
  if (settings.grad_clip) args.insert(args.end(), {"--grad-clip", Number(*settings.grad_clip)});
  // The schedule's flags only when set, so that a job without one runs on older workers.
  if (settings.warmup_steps > 0) args.insert(args.end(), {"--warmup-steps", std::to_string(settings.warmup_steps)});
  if (!settings.lr_decay.empty()) args.insert(args.end(), {"--lr-decay", settings.lr_decay});
  if (settings.decay_steps > 0) args.insert(args.end(), {"--decay-steps", std::to_string(settings.decay_steps)});
  if (settings.min_lr) args.insert(args.end(), {"--min-lr", Number(*settings.min_lr)});
  if (!eval_data.empty()) {
    args.insert(args.end(), {"--eval-data", eval_data, "--eval-every", std::to_string(settings.eval_every),
                             "--eval-samples", std::to_string(settings.eval_samples)});
  }
  if (settings.trace_step > 0) {
    args.insert(args.end(), {"--trace", (job_dir / "traces" / "rank-{rank}.json").string(), "--trace-step",
                             std::to_string(settings.trace_step)});
  }
  if (has_checkpoint) args.insert(args.end(), {"--resume", checkpoints.string()});
  return args;
}

// `poplar-worker network` for a rank of this job (without the device's flags).
std::vector<std::string> NetworkArgs(const LaunchSettings& settings, const fs::path& job_dir) {
  std::vector<std::string> args = {"network", "--precision", settings.precision, "--metrics",
                                   (job_dir / "metrics" / "rank-{rank}.jsonl").string()};
  if (settings.network_max_bytes > 0) {
    args.insert(args.end(), {"--max-bytes", std::to_string(settings.network_max_bytes)});
  }
  return args;
}

}  // namespace

void AddDeviceSettings(const DeviceInfo& device, std::vector<std::string>& args, std::vector<std::string>& env) {
  if (device.emulated) {
    args.insert(args.end(), {"--threads", std::to_string(device.threads), "--slowdown", Number(device.slowdown),
                             "--memory-bytes", std::to_string(device.memory_bytes)});
    env.push_back("OMP_NUM_THREADS=" + std::to_string(device.threads));
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
  std::string data, eval_data;
  if (train) {
    data = TokenFile(config, settings.data_path, "data_path");
    if (!settings.eval_data_path.empty()) eval_data = TokenFile(config, settings.eval_data_path, "eval_data_path");
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
  const bool has_checkpoint = fs::exists(job_dir / "checkpoints" / "latest");
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
    spec.args = train ? TrainArgs(settings, job_dir, data, eval_data, has_checkpoint) : NetworkArgs(settings, job_dir);
    spec.args.insert(spec.args.end(), {"--device", assigned[local]->emulated ? "cpu" : "cuda"});
    if (settings.timeout_s > 0) spec.args.insert(spec.args.end(), {"--timeout", std::to_string(settings.timeout_s)});
    spec.env = InheritedEnvironment();
    spec.env.insert(spec.env.end(),
                    {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(plan.WorldSize()),
                     "LOCAL_RANK=" + std::to_string(local), "LOCAL_WORLD_SIZE=" + std::to_string(node_ranks.size()),
                     "MASTER_ADDR=" + settings.master_addr, "MASTER_PORT=" + std::to_string(settings.master_port)});
    AddDeviceSettings(*assigned[local], spec.args, spec.env);
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
  }
  if (!settings.resume) {
    std::error_code ignored;
    for (const RankProcess& process : processes) fs::remove(process.metrics_path, ignored);
  }
  return processes;
}

std::chrono::seconds StopGrace(const LaunchSettings& settings) {
  return std::chrono::seconds(settings.stop_grace_s > 0 ? settings.stop_grace_s : kDefaultStopGraceSeconds);
}

void RemoveJobFolder(const AgentConfig& config, const std::string& job_id) {
  CheckJobId(job_id);  // a plain name: the folder is inside jobs/
  std::error_code ignored;
  fs::remove_all(JobFolder(config, job_id), ignored);
}

}  // namespace poplar
