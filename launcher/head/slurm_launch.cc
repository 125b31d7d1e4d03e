#include "launcher/head/slurm_launch.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <variant>

#include "launcher/head/srun_step.h"
#include "planner/base/command_failed.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/spawner.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/cluster/cluster_profiles.h"
#include "planner/cluster/emulated_device.h"
#include "planner/formats/job_settings.h"
#include "planner/formats/precision.h"
#include "planner/formats/train_command.h"
#include "planner/search/plan_file.h"
#include "planner/search/plan_report.h"
#include "planner/search/planner.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

// `name` installed beside the running `poplar`, or in the build tree's `subfolder`
// (build/planner/poplar, build/launcher/poplar-worker, build/agent/poplar-agent).
std::string ProgramBesideHead(const std::string& name, const std::string& subfolder) {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (const fs::path& candidate : {self.parent_path() / name, self.parent_path().parent_path() / subfolder / name}) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return FindInPath(name);
}

// `text` as one word of a POSIX shell: in single quotes, each ' written '\''.
std::string ShellWord(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The flags and environment of the `k`-th device of `type` on `node`, for `training` or
// a profile: an emulated device's stretch and cap, or a GPU's NVML index as CUDA's
// only device.
struct DeviceFlags {
  std::vector<std::string> args;
  std::vector<std::string> env;
  int threads = 0;  // an emulated device's compute threads; 0 for a GPU
};

DeviceFlags DeviceFlagsOf(const ClusterSpec& cluster, const SlurmPlace& place, const std::string& node,
                          const std::string& type, int k, bool training) {
  DeviceFlags flags;
  for (const NodeGpus& listed : place.gpus) {
    if (listed.node != node) continue;
    for (const ListedGpu& gpu : listed.gpus) {
      if (gpu.type != type || k-- != 0) continue;
      flags.args = {"--device", "cuda"};
      // By UUID where NVML gave one: a job whose devices Slurm constrains (cgroups) sees
      // its GPUs numbered from 0, not by the node's indices.
      flags.env = {"CUDA_DEVICE_ORDER=PCI_BUS_ID",
                   "CUDA_VISIBLE_DEVICES=" + (gpu.uuid.empty() ? std::to_string(gpu.index) : gpu.uuid)};
      return flags;
    }
  }
  for (const EmulatedDeviceSpec& device : cluster.slurm->emulated) {
    if (device.type != type) continue;
    flags.args = {"--device", "cpu"};
    const std::vector<std::string> emulated = EmulatedWorkerFlags(device, k, training);
    flags.args.insert(flags.args.end(), emulated.begin(), emulated.end());
    flags.env = {"OMP_NUM_THREADS=" + std::to_string(device.threads)};
    flags.threads = device.threads;
    return flags;
  }
  throw CommandFailed("node '" + node + "' has no device " + std::to_string(k + 1) + " of type " + type);
}

// The profiles of every device type: the cluster file's `profiles` folder has those it
// has, else the attempt before this one (`previous`, a resume's attempts/N: a requeued
// job measures nothing again); each other type is measured on its first node by one
// srun task of `poplar-worker profile`. All go to run_dir/profiles.
std::map<std::string, DeviceProfile> SlurmProfiles(const ClusterSpec& cluster, const SlurmPlace& place,
                                                   const std::string& model_file, const std::string& run_dir,
                                                   const std::string& previous) {
  const fs::path dir = fs::path(run_dir) / "profiles";
  MakeOutputFolder(dir.string(), dir.string());
  for (const std::string& type : cluster.DeviceTypes()) {
    const fs::path kept = dir / (type + ".json");
    std::optional<fs::path> cached;
    for (const std::string& folder : {cluster.profiles_dir, previous.empty() ? "" : previous + "/profiles"}) {
      const fs::path file = fs::path(folder) / (type + ".json");
      if (!cached && !folder.empty() && fs::is_regular_file(file)) cached = file;
    }
    if (cached) {
      WriteFileAtomically(kept.string(), ReadTextFile(cached->string()));
      std::cout << "profile of " << type << ": " << cached->string() << std::endl;
      continue;
    }
    std::string node;
    for (const NodeSpec& candidate : cluster.nodes) {
      for (const DeviceGroupSpec& group : candidate.devices) {
        if (node.empty() && group.type == type) node = candidate.name;
      }
    }
    const DeviceFlags device = DeviceFlagsOf(cluster, place, node, type, 0, /*training=*/false);
    // One task on the type's node.
    std::vector<std::string> argv = {place.srun, "--nodes=1", "--ntasks=1", "--nodelist=" + node,
                                     "--kill-on-bad-exit=1"};
    if (device.threads > 0) argv.push_back("--cpus-per-task=" + std::to_string(device.threads));
    argv.push_back("/usr/bin/env");
    argv.insert(argv.end(), device.env.begin(), device.env.end());
    argv.insert(argv.end(), {place.worker, "profile", "--model-config", model_file, "--device-type", type, "-o",
                             kept.string(), "--precision", WorkerPrecisionName(cluster.precision)});
    argv.insert(argv.end(), device.args.begin(), device.args.end());
    if (cluster.stage) argv.insert(argv.end(), {"--stage", std::to_string(*cluster.stage)});
    std::cout << "profiling " << type << " on node " << node << " (srun poplar-worker profile)" << std::endl;
    RunToEnd(argv);
  }
  return LoadClusterProfiles(cluster, dir.string());
}

// A file a job setting names (data, eval_data, init): under Slurm, a path relative to
// the launch's working folder, which every node sees (a shared file system).
std::string SlurmJobFile(const ClusterSpec& cluster, const std::string& key, const std::string& path) {
  const std::string resolved = fs::absolute(path).lexically_normal().string();
  const bool folder = std::get<WorkFileSetting>(JobSettingNamed(key).kind).folder;
  std::error_code error;
  if (!fs::is_regular_file(resolved, error) && !(folder && fs::is_directory(resolved, error))) {
    throw InputError(cluster.file, "job." + key,
                     "'" + path + "' is not a file" + (folder ? " or a folder" : "") +
                         " (under --slurm, job files are relative to the folder poplar launch runs in, which "
                         "every node must see)");
  }
  return resolved;
}

// The one srun step of the plan's ranks: run_dir/slurm/ holds its host file (rank r's
// node on line r, for --distribution=arbitrary), ranks.sh (what task r runs: rank r's
// torchrun environment, device and `poplar-worker train`), the ranks' metrics files
// and the plans handed to rank 0; `model_file` is the job's model, written there.
SrunStep SlurmStep(const LaunchOptions& options, const ClusterSpec& cluster, const SlurmPlace& place,
                   const JobPlace& job_place, const JobSpec& job, const PreparedPlan& prepared,
                   const std::string& run_dir, const std::string& model_file, const Resumption& resumption) {
  const fs::path dir = fs::absolute(fs::path(run_dir) / "slurm");
  fs::remove_all(dir / "metrics");
  fs::remove_all(dir / "plans");  // plans are numbered per launch, as the agents' are
  fs::create_directories(dir / "metrics");
  fs::create_directories(dir / "plans");
  const fs::path checkpoints = fs::absolute(fs::path(run_dir) / "checkpoints");
  const std::string plan_file = fs::absolute(fs::path(run_dir) / "plan.json").string();
  const TrainFiles files{
      plan_file,
      model_file,
      (dir / "metrics" / "rank-{rank}.jsonl").string(),
      checkpoints.string(),
      (dir / "plans").string(),
      (fs::absolute(fs::path(run_dir)) / ("model." + job.settings.save_format.value_or("pt"))).string(),
      (dir / "traces" / "rank-{rank}.json").string()};
  const TrainRun run{
      job_place.precision,
      WorkerFlags(job.settings,
                  [&](const std::string& key, const std::string& path) { return SlurmJobFile(cluster, key, path); }),
      options.trace_step,
      resumption.resume && fs::exists(checkpoints / "latest"),
      resumption.require_checkpoint,
      options.timeout_s};
  const std::vector<std::string> train = TrainCommand(files, run);

  SrunStep step;
  step.srun = place.srun;
  step.cwd = fs::current_path().string();
  step.stop_grace = std::chrono::seconds(StopGraceSeconds(job.settings));
  const int world = prepared.plan.WorldSize();
  std::string hosts;
  std::string script = "#!/bin/sh\n# What srun's task N runs: rank N of job " + job_place.job_id +
                       " (poplar launch --slurm).\ncase \"$SLURM_PROCID\" in\n";
  std::map<std::string, int> on_node;                       // node -> ranks placed so far
  std::map<std::pair<std::string, std::string>, int> seen;  // (node, type) -> ranks placed so far
  std::map<std::string, int> node_ranks;
  for (const RankPlacement& placement : prepared.plan.placement) ++node_ranks[placement.node];
  // srun gives a task one CPU unless told (since Slurm 22.05 it no longer takes sbatch's
  // --cpus-per-task): each rank gets its even share of its node's CPUs.
  const int cpus_per_rank = CpusPerRank(place.allocation.cpus, node_ranks);
  for (int rank = 0; rank < world; ++rank) {
    const RankPlacement& placement = prepared.plan.placement[rank];
    const DeviceFlags device = DeviceFlagsOf(cluster, place, placement.node, placement.device_type,
                                             seen[{placement.node, placement.device_type}]++, /*training=*/true);
    if (cpus_per_rank > 0 && device.threads > cpus_per_rank) {
      throw CommandFailed("--slurm: " + placement.device_type + " computes with " + Count(device.threads, "thread") +
                          " (slurm.emulated in " + cluster.file + "), but each rank of the plan gets " +
                          Count(cpus_per_rank, "CPU") + " of node '" + placement.node + "' (" +
                          Count(place.allocation.cpus.at(placement.node), "CPU") + " for " +
                          Count(node_ranks[placement.node], "rank") +
                          "): ask Slurm for more CPUs (--cpus-per-task), or give the device fewer threads");
    }
    std::vector<std::string> env = {"RANK=" + std::to_string(rank),
                                    "WORLD_SIZE=" + std::to_string(world),
                                    "LOCAL_RANK=" + std::to_string(on_node[placement.node]++),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(node_ranks[placement.node]),
                                    "MASTER_ADDR=" + job_place.master_addr,
                                    "MASTER_PORT=" + std::to_string(job_place.master_port)};
    env.insert(env.end(), device.env.begin(), device.env.end());
    std::vector<std::string> argv = {place.worker};
    argv.insert(argv.end(), train.begin(), train.end());
    argv.insert(argv.end(), device.args.begin(), device.args.end());
    script += std::to_string(rank) + ") exec /usr/bin/env";
    for (const std::string& word : env) script += " " + ShellWord(word);
    for (const std::string& word : argv) script += " " + ShellWord(word);
    script += " ;;\n";
    hosts += placement.node + "\n";
    step.metrics_files.push_back((dir / "metrics" / ("rank-" + std::to_string(rank) + ".jsonl")).string());
    step.nodes.push_back(placement.node);
  }
  script += "*) echo \"poplar: task $SLURM_PROCID is not a rank of the plan (" + std::to_string(world) +
            " ranks)\" >&2; exit 1 ;;\nesac\n";
  if (options.trace_step > 0) fs::create_directories(dir / "traces");
  WriteFileAtomically((dir / "hostfile").string(), hosts);
  WriteFileAtomically((dir / "ranks.sh").string(), script);
  step.args = {"--ntasks=" + std::to_string(world), "--distribution=arbitrary", "--kill-on-bad-exit=1", "--label"};
  if (cpus_per_rank > 0) step.args.push_back("--cpus-per-task=" + std::to_string(cpus_per_rank));
  step.args.insert(step.args.end(), {"/bin/sh", (dir / "ranks.sh").string()});
  step.cpus_per_rank = cpus_per_rank;
  step.env = WholeEnvironment();
  step.env.push_back("SLURM_HOSTFILE=" + (dir / "hostfile").string());
  return step;
}

// The rendezvous port under Slurm: --master-port, else one rank 0's node finds free, so
// that jobs sharing a node (or several launches in one allocation) do not collide.
int SlurmMasterPort(const LaunchOptions& options, const SlurmPlace& place, const std::string& rank0_node) {
  if (options.master_port > 0) return options.master_port;
  return FreePortOnNode(rank0_node, place.srun, ProgramBesideHead("poplar-agent", "agent"));
}

}  // namespace

ClusterSpec SlurmCluster(const LaunchOptions& options, SlurmPlace& place) {
  ClusterSpec cluster = LoadClusterFile(options.cluster_file, ClusterRead::kSlurmAllocation);
  place.allocation = CurrentSlurmAllocation();
  place.srun = FindInPath("srun");
  place.worker = options.worker.empty() ? ProgramBesideHead("poplar-worker", "launcher") : options.worker;
  if (cluster.slurm->discover_gpus) {
    place.gpus = ListAllocationGpus(place.allocation, place.srun, ProgramBesideHead("poplar-agent", "agent"));
  }
  cluster = OnNodes(cluster, AllocationNodes(place.allocation, *cluster.slurm, place.gpus));
  std::vector<std::string> described;
  for (const NodeSpec& node : cluster.nodes) {
    std::vector<std::string> devices;
    for (const DeviceGroupSpec& group : node.devices)
      devices.push_back(std::to_string(group.count) + " x " + group.type);
    described.push_back(node.name + " (" + node.host + ": " + Join(devices, ", ") + ")");
  }
  std::cout << "Slurm job " << place.allocation.job_id << ": " << Count(cluster.nodes.size(), "node") << ", "
            << Join(described, "; ") << std::endl;
  return cluster;
}

void RunUnderSlurm(const LaunchStart& start, const SlurmPlace& place) {
  const auto& [options, interruption, json, cluster, job_place, job, run_dir, directory, given] = start;
  const std::string& job_id = job_place.job_id;
  StopIfInterrupted(interruption, job_id);
  const std::string previous_attempt = options.resume ? directory.KeepPreviousAttempt() : "";
  directory.Record();
  const fs::path model_file = fs::absolute(fs::path(run_dir) / "slurm" / "model.json");
  fs::create_directories(model_file.parent_path());
  WriteFileAtomically(model_file.string(), job_place.model);
  const PreparedPlan prepared =
      given ? *std::move(given)
            : PlanFromProfiles(options, cluster,
                               SlurmProfiles(cluster, place, model_file.string(), run_dir, previous_attempt));
  StopIfInterrupted(interruption, job_id);
  job_place.plan_text = prepared.text;
  job_place.precision = prepared.precision.name;
  // Rank 0's node as Slurm reaches it, whatever host a plan made elsewhere says.
  job_place.master_addr = cluster.nodes.at(NodeIndex(cluster, prepared.plan.placement.at(0).node)).host;
  job_place.master_port = SlurmMasterPort(options, place, prepared.plan.placement.at(0).node);
  WriteFileAtomically((fs::path(run_dir) / "plan.json").string(), prepared.text);
  const Resumption resumption{options.resume, false};
  const SrunStep step =
      SlurmStep(options, cluster, place, job_place, job, prepared, run_dir, model_file.string(), resumption);

  std::vector<RankInfo> ranks;
  for (const RankPlacement& placement : prepared.plan.placement)
    ranks.push_back({placement.node, placement.device_type});
  std::cout << "launching job " << job_id << " as one srun step of Slurm job " << place.allocation.job_id << ": "
            << Count(ranks.size(), "rank") << " on " << Count(cluster.nodes.size(), "node")
            << (step.cpus_per_rank > 0 ? " (" + Count(step.cpus_per_rank, "CPU") + " each)" : "") << ", "
            << Count(*job.settings.steps, "step") << "; rendezvous " << job_place.master_addr << ":"
            << job_place.master_port << "; run directory " << run_dir << std::endl;
  LaunchMonitor monitor(run_dir, ranks, *job.settings.steps, options.progress_every, std::cout);
  monitor.StartingPlan(prepared.plan.predicted_step_s);
  if (options.resume) monitor.ExpectResume(job_id);
  const fs::path plans = fs::path(run_dir) / "slurm" / "plans";
  int handed = 0;
  // Rank 0 reads the plans the head writes into run_dir/slurm/plans.
  const auto hand = [&](const std::string& plan_text, const std::string& reason,
                        const std::string& proposer) -> std::optional<int> {
    try {
      monitor.PlanSwitch(HandPlanSwitch(plans.string(), handed + 1, prepared.plan, plan_text, reason, "the new plan",
                                        job.settings.batch_min.value_or(0), job.settings.batch_max.value_or(0)));
    } catch (const InputError& error) {
      std::cout << proposer << ": the new plan was not handed to rank 0: " << error.what() << std::endl;
      return std::nullopt;
    }
    return ++handed;
  };
  PlanProposers proposers(RebalancerFor(options, cluster, prepared, *job.settings.steps),
                          BatchChooserFor(cluster, job, prepared), prepared, run_dir, hand);
  const SrunOutcome outcome = RunSrunStep(
      step, monitor, interruption, std::cout,
      [&](int rank, const std::string& line) { proposers.Metrics(rank, nlohmann::json::parse(line, nullptr, false)); });
  const int exit_status = outcome.signal != 0 ? 128 + outcome.signal : 1;
  if (!outcome.started) {
    throw CommandFailed("job " + job_id + " failed: " + monitor.RootCause() + "; no worker was started", exit_status);
  }
  directory.Keep();
  if (!previous_attempt.empty()) {
    std::cout << "the previous attempt's plan and summary are kept in " << previous_attempt << "\n";
  }
  const nlohmann::ordered_json summary = WriteSummary(options, run_dir, job_id, prepared, monitor);
  if (json) json->Print(summary);
  if (!monitor.failed()) return SayWhatWasTrained(summary, job, run_dir);
  const std::string user_stop = monitor.UserStop();
  const std::string what = user_stop.empty() ? "failed: " + monitor.RootCause() : "was " + user_stop;
  const std::string kept =
      monitor.CheckpointsKept(job.settings.checkpoint_every.value_or(0), (fs::path(run_dir) / "checkpoints").string());
  throw CommandFailed("job " + job_id + " " + what + "; every rank was stopped; " + kept + "; logs in " + run_dir +
                          "/logs; resume with: poplar launch " + options.cluster_file + " --slurm --job-id " + job_id +
                          " --resume",
                      exit_status);
}

}  // namespace poplar
