// The cluster file: which devices exist, where, how they are connected, and what the
// training job asks for (global batch, precision, optionally a fixed ZeRO stage).
//
// Format (YAML; docs/formats.md is the reference, unknown keys are errors):
//
//   name: lab
//   profiles: profiles/lab          # optional; relative to this file
//   training:
//     global_batch: 512             # samples per optimizer step
//     precision: mixed              # fp32 | mixed
//     stage: auto                   # auto | 0 | 1 | 2 | 3
//     state_split: auto             # auto | even: ZeRO's shares of the states
//   network:
//     intra_node: {bandwidth_gbps: 2400, latency_us: 5}   # needed if a node has 2+ devices
//     inter_node: {bandwidth_gbps: 100, latency_us: 20}   # needed if there are 2+ nodes
//     measured: network.json        # or: what `poplar network` measured; replaces both
//   nodes:
//     - name: node-a
//       host: 10.0.0.1              # optional, defaults to name
//       agent: 10.0.0.1:7150        # optional, its poplar-agent; defaults to host:7150
//       devices:
//         - {type: A100-80GB, count: 8}
//   slurm:                          # poplar launch --slurm: the nodes of the allocation
//     gpus: auto                    #   auto (each node's NVIDIA GPUs, NVML through srun) | none
//     emulated: [{type: emu-fast, count: 1, slowdown: 1.0, memory_mib: 48}]  # on every node
//   credentials: {ca: ..., cert: ..., key: ..., token: ...}   # to reach the agents
//   job:                            # what `poplar launch` trains (optional)
//     model: models/gpt-small.json  # model config, relative to this file
//     data: wikitext.bin            # token file, relative to each agent's work_dir
//     steps: 1000
//     lr: 3e-4                      # optional: weight_decay, grad_clip, warmup_steps,
//                                   #   lr_decay, decay_steps, min_lr, checkpoint_every,
//                                   #   keep_checkpoints, stop_grace_s, eval_data,
//                                   #   eval_every, eval_samples
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/base/text_file.h"
#include "planner/cluster/credentials.h"
#include "planner/cluster/emulated_device.h"
#include "planner/formats/job_settings.h"
#include "planner/formats/lr_schedule.h"
#include "planner/formats/model_config.h"
#include "planner/formats/network.h"
#include "planner/formats/precision.h"
#include "planner/formats/worker_plan.h"

namespace poplar {

// The most devices a cluster file may list, over all its nodes.
constexpr std::int64_t kMostClusterDevices = 1'000'000;

struct DeviceGroupSpec {
  std::string type;  // names the profile DIR/<type>.json
  int count = 0;     // > 0
};

struct NodeSpec {
  std::string name;
  std::string host;   // where this node's ranks run; defaults to name
  std::string agent;  // its poplar-agent's address host:port; defaults to host:7150
  std::vector<DeviceGroupSpec> devices;
};

// The training job `poplar launch` runs: its model and its settings
// (planner/formats/job_settings.h); unset settings take the worker's defaults.
struct JobSpec {
  std::string model_config;  // path, resolved against the cluster file's folder
  JobSettings settings;      // data and steps are set
};

// The schedule the workers will follow (ResolveLrSchedule, as the worker resolves it).
// Throws InputError naming `file` and the job's key when it is refused (a job the
// cluster file was read with passes), or `steps_flag` when the steps it sets
// (`poplar launch --steps`) leave no step to decay over.
LrSchedule ScheduleOf(const JobSpec& job, const std::string& file = "", const std::string& steps_flag = "");

inline constexpr int kDefaultAgentPort = 7150;

// One device of the cluster as a rank. Ranks are numbered in cluster-file order: node by
// node, device group by group (plans, `poplar network` and the worker all use it).
struct RankSlot {
  std::string node;
  std::string host;
  std::string device_type;
  int local_index = 0;  // among the node's devices
};

// The cluster file's `slurm` section: what every node of a Slurm allocation offers, for
// `poplar launch --slurm` (launcher/head/slurm_allocation.h), whose nodes are the
// allocation's rather than the file's `nodes`.
struct SlurmSpec {
  bool discover_gpus = true;                 // gpus: auto; none: no GPU is looked for
  std::vector<EmulatedDeviceSpec> emulated;  // on every node, after its GPUs
};

struct ClusterSpec {
  std::string file;  // the path it was read from, for error messages
  std::string name;
  std::string profiles_dir;       // resolved against the file's folder; empty if not given
  std::int64_t global_batch = 0;  // 1..kMostGlobalBatch
  Precision precision = Precision::kMixed;
  // As written: fp32, mixed (bf16 where every device has it, else fp16), bf16 or fp16
  // (precision_choice.h resolves it against the devices).
  std::string precision_name = "mixed";
  std::optional<int> stage;  // nullopt: choose automatically
  // training.state_split: auto (true: the planner may split the states unevenly,
  // planner.h) or even.
  bool uneven_state_split = true;
  std::optional<LinkSpec> intra_node;
  std::optional<LinkSpec> inter_node;
  std::string measured_network_file;                // network.measured, resolved; empty if not given
  std::optional<MeasuredNetwork> measured_network;  // read unless kNetworkElsewhere
  std::vector<NodeSpec> nodes;
  std::optional<SlurmSpec> slurm;
  std::optional<CredentialPaths> credentials;
  std::optional<JobSpec> job;

  int DeviceCount() const;  // at most kMostClusterDevices
  // Device types in order of first appearance.
  std::vector<std::string> DeviceTypes() const;
  // Every device, in rank order (one entry per device: DeviceCount() entries).
  std::vector<RankSlot> Ranks() const;
  // The link every collective crosses: inter_node when the cluster spans 2+ nodes,
  // else intra_node. Present for a cluster read completely (kComplete) with 2+ devices
  // and no measured network.
  std::optional<LinkSpec> SlowestLink() const;
  // What the cost model charges for each collective among all the cluster's devices:
  // the measured network when there is one, else rings over SlowestLink(); nothing with
  // one device. Throws InputError naming `network` when there is neither.
  CollectiveTimes Collectives() const;
  // The files that reading and using the cluster involves, for commands that must not
  // write over them: this file, job.model, network.measured, the credentials' four
  // files, and the profiles folder's <type>.json of each type (those that exist).
  std::vector<InputFile> InputFiles() const;
};

// kNetworkElsewhere: `network.measured` is recorded, not read, and declared links are
// not required: for `poplar network`, which makes that file, and for `--network FILE`,
// which replaces it (AttachMeasuredNetwork).
// kSlurmAllocation: `nodes` may be absent and the network is not checked yet, for
// `poplar launch --slurm`, which places the cluster on its allocation's nodes (OnNodes).
enum class ClusterRead { kComplete, kNetworkElsewhere, kSlurmAllocation };

// Parses and validates YAML text. `file` names the source in errors. Throws InputError;
// also when the measured network was measured on another shape of cluster (ranks,
// nodes, precision).
ClusterSpec ParseClusterYaml(const std::string& text, const std::string& file,
                             ClusterRead read = ClusterRead::kComplete);
// Reads the network file `path` (`poplar network`) into cluster.measured_network, which
// the cost model then charges instead of the declared links. Throws InputError naming
// `source` and `key` (the cluster file and network.measured, or a flag) unless the file
// exists and was measured on this cluster: the same ranks (node and device type of each,
// in rank order) and its precision.
void AttachMeasuredNetwork(ClusterSpec& cluster, const std::string& path, const std::string& source,
                           const std::string& key);
// Reads and parses a file. Throws InputError (also when it cannot be read).
ClusterSpec LoadClusterFile(const std::string& path, ClusterRead read = ClusterRead::kComplete);
// The cluster file as `plan`, `simulate` and `launch` read it: with `network_flag` (the
// --network FILE they take) empty, as it is; else with that network file in place of
// the file's `network` section (errors name --network).
ClusterSpec LoadClusterFileWithNetworkFlag(const std::string& path, const std::string& network_flag);

// `cluster` (read with kSlurmAllocation) on `nodes`, a Slurm allocation's, with its
// network checked and its measured network read as a complete read does. Throws
// InputError naming the cluster file: a link the nodes need is not declared, or the
// measured network was measured on other nodes.
ClusterSpec OnNodes(ClusterSpec cluster, std::vector<NodeSpec> nodes);

// `cluster` with only the nodes named in `names` (in the cluster's order), as an
// elastic launch re-plans over the nodes still reachable. A measured network is of the
// whole cluster: without some of its nodes it is dropped, and the declared links price
// the collectives (planning throws InputError naming `network` when there are none).
ClusterSpec WithNodes(const ClusterSpec& cluster, const std::vector<std::string>& names);

// `cluster` training with a global batch of `global_batch` samples: what an adaptive
// batch's plans are made, checked and predicted for (job.batch_min to job.batch_max).
ClusterSpec AtGlobalBatch(ClusterSpec cluster, std::int64_t global_batch);

// The cluster's job.model (the cluster must have a job), read and checked as the worker
// will: `text` is what the head sends the agents. Throws InputError naming the cluster
// file and job.model when the file cannot be read (missing, a folder), or the model
// file and its key when it is not a valid model.
struct JobModel {
  std::string text;
  ModelConfig config;
};
JobModel LoadJobModel(const ClusterSpec& cluster);
// Holds the model a file records (a profile's or a plan's `model`: its parameter count,
// and its configuration where it gives one) to `job_model`, the cluster's job.model.
// Throws InputError naming `file` and model.params or model.config, ending with `remedy`
// ("plan for that model (poplar plan)").
void RequireJobModel(const ClusterSpec& cluster, const ModelConfig& job_model, const std::string& file,
                     std::optional<std::int64_t> params, const std::optional<ModelConfig>& config,
                     const std::string& remedy);

}  // namespace poplar
