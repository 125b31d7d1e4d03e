#include "planner/cluster/cluster.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <type_traits>
#include <variant>

#include "planner/base/host_port.h"
#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/base/yaml_fields.h"
#include "planner/formats/profile.h"
#include "planner/formats/training_limits.h"

namespace poplar {
namespace {

constexpr double kBitsPerByte = 8.0;

LinkSpec ParseLink(YamlFields fields) {
  LinkSpec link;
  const double gbps =
      fields.NumberIn("bandwidth_gbps", kLeastLinkGbps, kMostLinkGbps, "a number of gigabits per second");
  link.bandwidth_bytes_per_s = gbps * 1e9 / kBitsPerByte;
  const double latency_us = fields.NumberIn("latency_us", 0, kMostLinkLatencyUs, "a number of microseconds");
  link.latency_s = latency_us * 1e-6;
  fields.Finish();
  return link;
}

void ParseTraining(YamlFields fields, ClusterSpec& cluster) {
  cluster.global_batch = fields.IntegerIn("global_batch", 1, kMostGlobalBatch, "a number of samples");
  if (auto text = fields.OptionalString("precision")) {
    auto precision = ParsePrecision(*text);
    if (!precision) fields.Fail("precision", "must be fp32, mixed, bf16 or fp16, got '" + *text + "'");
    cluster.precision = *precision;
    cluster.precision_name = *text;
  }
  // The word auto, or a stage written as a number, as global_batch is: '3' is the string "3".
  if (const auto given = fields.OptionalScalar("stage"); given && given->Scalar() != "auto") {
    const std::string text = given->Scalar();
    const bool digit = text.size() == 1 && text[0] >= '0' && text[0] <= '3';
    if (!digit || !YamlFields::IsWrittenAs(*given, {"int"})) {
      fields.Fail("stage", "must be auto, 0, 1, 2 or 3, got " + YamlFields::Shown(*given) +
                               (digit ? "; write it without quotes: stage: " + text : ""));
    }
    cluster.stage = text[0] - '0';
  }
  if (const auto split = fields.OptionalString("state_split")) {
    if (*split != "auto" && *split != "even") fields.Fail("state_split", "must be auto or even, got '" + *split + "'");
    cluster.uneven_state_split = *split == "auto";
  }
  fields.Finish();
}

DeviceGroupSpec ParseDeviceGroup(YamlFields fields) {
  DeviceGroupSpec group;
  group.type = fields.String("type");
  if (const std::string problem = DeviceTypeProblem(group.type); !problem.empty()) fields.Fail("type", problem);
  group.count = static_cast<int>(fields.IntegerIn("count", 1, 1'000'000, "a number of devices"));
  fields.Finish();
  return group;
}

SlurmSpec ParseSlurm(YamlFields fields) {
  SlurmSpec slurm;
  const std::string gpus = fields.OptionalString("gpus").value_or("auto");
  if (gpus != "auto" && gpus != "none") fields.Fail("gpus", "must be auto or none, got '" + gpus + "'");
  slurm.discover_gpus = gpus == "auto";
  slurm.emulated = ParseEmulatedDevices(fields, "emulated");
  fields.Finish();
  if (!slurm.discover_gpus && slurm.emulated.empty()) {
    fields.Fail("gpus", "is none and there are no emulated devices: the nodes would offer no device");
  }
  return slurm;
}

// What the nodes need of the network section: the links their collectives cross,
// unless the network is measured; the measured network read (kComplete).
void CheckNetwork(ClusterSpec& cluster, ClusterRead read) {
  const bool measured = !cluster.measured_network_file.empty() || read == ClusterRead::kNetworkElsewhere;
  const auto several = [](const NodeSpec& node) {
    int devices = 0;
    for (const auto& group : node.devices) devices += group.count;
    return devices > 1;
  };
  if (cluster.nodes.size() > 1 && !cluster.inter_node && !measured) {
    throw InputError(cluster.file, "network.inter_node",
                     "is required when the cluster has more than one node (or network.measured)");
  }
  if (std::any_of(cluster.nodes.begin(), cluster.nodes.end(), several) && !cluster.intra_node && !measured) {
    throw InputError(cluster.file, "network.intra_node",
                     "is required when a node has more than one device (or network.measured)");
  }
  if (!cluster.measured_network_file.empty() && read == ClusterRead::kComplete) {
    AttachMeasuredNetwork(cluster, cluster.measured_network_file, cluster.file, "network.measured");
  }
}

NodeSpec ParseNode(YamlFields fields) {
  NodeSpec node;
  node.name = fields.String("name");
  node.host = fields.OptionalString("host").value_or(node.name);
  node.agent = fields.OptionalString("agent").value_or(node.host + ":" + std::to_string(kDefaultAgentPort));
  if (const std::string problem = HostPortProblem(node.agent, 1); !problem.empty()) fields.Fail("agent", problem);
  YAML::Node devices = fields.List("devices", "a non-empty list of {type, count}");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    node.devices.push_back(
        ParseDeviceGroup(YamlFields(devices[i], fields.file(), fields.KeyPath("devices[" + std::to_string(i) + "]"))));
  }
  fields.Finish();
  return node;
}

// The job's schedule, resolved as the workers will; a refusal names the setting by its
// key in the job section, and the job's steps by `steps` (what set them).
LrSchedule ResolveJobSchedule(const JobSettings& job, const std::string& steps) {
  return ResolveLrSchedule(ScheduleSettingsOf(job), job.lr.value_or(kDefaultLearningRate), job.steps.value_or(0),
                           {"warmup_steps", "decay_steps", "min_lr", steps, "add lr_decay: cosine or linear"});
}

// The job section's settings (planner/formats/job_settings.h), each by its row: a value
// of the wrong type or out of range, a missing required one or one whose `needs` is
// absent is refused, naming its key.
JobSettings ReadJobSettings(YamlFields& fields) {
  JobSettings settings;
  for (const JobSetting& setting : JobSettingTable()) {
    const std::string& key = setting.key;
    if (!setting.required && !fields.Has(key)) continue;
    std::visit(
        [&](const auto& kind) {
          using Kind = std::decay_t<decltype(kind)>;
          if constexpr (std::is_same_v<Kind, CountSetting>) {
            settings.*kind.member = fields.IntegerIn(key, kind.low, kind.high, setting.what);
          } else if constexpr (std::is_same_v<Kind, NumberSetting>) {
            const double value = fields.Number(key);
            if (const auto refused = Refusal(kind, value))
              fields.Fail(key, *refused + ", got " + fields.Child(key).Scalar());
            settings.*kind.member = value;
          } else {
            const std::string value = fields.String(key);
            if (const auto refused = Refusal(kind, value)) fields.Fail(key, *refused + ", got '" + value + "'");
            settings.*kind.member = value;
          }
        },
        setting.kind);
  }
  if (const auto unmet = UnmetNeed(settings)) fields.Fail(unmet->first, unmet->second);
  return settings;
}

JobSpec ParseJob(YamlFields fields, const std::string& base_folder, std::int64_t global_batch) {
  JobSpec job;
  job.model_config = ResolveAgainst(base_folder, fields.String("model"));
  job.settings = ReadJobSettings(fields);
  // An adaptive batch's bounds hold the batch the job starts with (training.global_batch).
  if (const auto low = job.settings.batch_min) {
    const auto high = job.settings.batch_max;
    if (!high) fields.Fail("batch_min", "is the adaptive batch's bound, with batch_max: add batch_max");
    if (*high < *low) {
      fields.Fail("batch_max", "is " + std::to_string(*high) + ", below batch_min " + std::to_string(*low));
    }
    if (global_batch < *low || global_batch > *high) {
      fields.Fail("batch_min", "the bounds " + std::to_string(*low) + " to " + std::to_string(*high) +
                                   " must hold the batch the job starts with, training.global_batch " +
                                   std::to_string(global_batch));
    }
  }
  fields.Finish();
  try {
    ResolveJobSchedule(job.settings, "steps");
  } catch (const InputError& refusal) {
    fields.Fail(refusal.file(), refusal.reason());  // the key refusal names, with its line
  }
  return job;
}

}  // namespace

LrSchedule ScheduleOf(const JobSpec& job, const std::string& file, const std::string& steps_flag) {
  try {
    return ResolveJobSchedule(job.settings, steps_flag.empty() ? "steps" : steps_flag);
  } catch (const InputError& refusal) {
    if (refusal.file() == steps_flag) throw;
    throw InputError(file, "job." + refusal.file(), refusal.reason());
  }
}

std::vector<InputFile> ClusterSpec::InputFiles() const {
  std::vector<InputFile> files = {{file, "the cluster file"}};
  if (job) files.push_back({job->model_config, "the cluster's job.model"});
  if (!measured_network_file.empty()) files.push_back({measured_network_file, "the cluster's network.measured"});
  if (credentials) {  // a plan written over the private key or the token would lock the head out
    files.push_back({credentials->ca, "the cluster's credentials.ca"});
    files.push_back({credentials->cert, "the cluster's credentials.cert"});
    files.push_back({credentials->key, "the cluster's credentials.key"});
    files.push_back({credentials->token, "the cluster's credentials.token"});
  }
  if (!profiles_dir.empty()) {
    for (const std::string& type : DeviceTypes()) {
      files.push_back({(std::filesystem::path(profiles_dir) / (type + ".json")).string(), "the profile of " + type});
    }
  }
  return files;
}

int ClusterSpec::DeviceCount() const {
  int total = 0;
  for (const auto& node : nodes) {
    for (const auto& group : node.devices) total += group.count;
  }
  return total;
}

std::vector<std::string> ClusterSpec::DeviceTypes() const {
  std::vector<std::string> types;
  std::set<std::string> seen;
  for (const auto& node : nodes) {
    for (const auto& group : node.devices) {
      if (seen.insert(group.type).second) types.push_back(group.type);
    }
  }
  return types;
}

std::optional<LinkSpec> ClusterSpec::SlowestLink() const { return nodes.size() > 1 ? inter_node : intra_node; }

std::vector<RankSlot> ClusterSpec::Ranks() const {
  std::vector<RankSlot> ranks;
  for (const NodeSpec& node : nodes) {
    int local = 0;
    for (const DeviceGroupSpec& group : node.devices) {
      for (int i = 0; i < group.count; ++i) ranks.push_back({node.name, node.host, group.type, local++});
    }
  }
  return ranks;
}

CollectiveTimes ClusterSpec::Collectives() const {
  if (measured_network) return measured_network->times;
  const int ranks = DeviceCount();
  if (ranks <= 1) return {};
  const std::optional<LinkSpec> link = SlowestLink();
  if (!link) {
    throw InputError(file, "network",
                     "declares no link for " + std::to_string(ranks) + " devices and no measured network was given");
  }
  return CollectiveTimes::OverLink(*link, ranks);
}

JobModel LoadJobModel(const ClusterSpec& cluster) {
  const std::string& path = cluster.job.value().model_config;
  JobModel model;
  try {
    model.text = ReadTextFile(path);
  } catch (const InputError& error) {
    throw InputError(cluster.file, "job.model", path + ": " + error.reason());
  }
  model.config = ParseModelConfig(model.text, path);
  return model;
}

void RequireJobModel(const ClusterSpec& cluster, const ModelConfig& job_model, const std::string& file,
                     std::optional<std::int64_t> params, const std::optional<ModelConfig>& config,
                     const std::string& remedy) {
  const std::string job = "the cluster's job.model (" + cluster.job.value().model_config + ")";
  if (params && *params != job_model.ParameterCount()) {
    throw InputError(file, "model.params",
                     "is " + std::to_string(*params) + " but " + job + " has " +
                         std::to_string(job_model.ParameterCount()) + " parameters; " + remedy);
  }
  // A model of the same size with other heads or another block size has other
  // activation memory.
  if (config && *config != job_model) {
    throw InputError(
        file, "model.config",
        "is " + ModelConfigJson(*config) + " but " + job + " is " + ModelConfigJson(job_model) + "; " + remedy);
  }
}

void AttachMeasuredNetwork(ClusterSpec& cluster, const std::string& path, const std::string& source,
                           const std::string& key) {
  const std::string make = "`poplar network " + cluster.file + " -o " + path + "`";
  std::error_code missing;
  if (!std::filesystem::exists(path, missing)) {
    throw InputError(source, key, path + " does not exist; make it with " + make);
  }
  if (std::filesystem::is_directory(path, missing)) {
    throw InputError(source, key, path + " is a folder, not a network file; make one with " + make);
  }
  MeasuredNetwork network = LoadNetworkFile(path);
  const std::string again = "; measure again with " + make;
  std::vector<NetworkRank> here;
  for (const RankSlot& rank : cluster.Ranks()) here.push_back({rank.node, rank.device_type});
  if (network.world_size() != static_cast<int>(here.size())) {
    throw InputError(source, key,
                     path + " was measured on " + std::to_string(network.world_size()) + " ranks; this cluster has " +
                         std::to_string(here.size()) + again);
  }
  for (std::size_t r = 0; r < here.size(); ++r) {
    const NetworkRank& there = network.ranks[r];
    if (!(there == here[r])) {
      throw InputError(source, key,
                       path + " measured rank " + std::to_string(r) + " as " + there.device_type + " on node '" +
                           there.node + "'; in this cluster it is " + here[r].device_type + " on node '" +
                           here[r].node + "'" + again);
    }
  }
  if (network.precision != cluster.precision) {
    throw InputError(source, key,
                     path + " was measured with " + WorkerPrecisionName(network.precision) +
                         " payloads; this cluster trains in " + WorkerPrecisionName(cluster.precision) + again);
  }
  cluster.measured_network_file = path;
  cluster.measured_network = std::move(network);
}

ClusterSpec ParseClusterYaml(const std::string& text, const std::string& file, ClusterRead read) {
  const YAML::Node root = ParseYamlDocument(text, file);
  YamlFields fields(root, file, "");

  ClusterSpec cluster;
  cluster.file = file;
  cluster.name = fields.OptionalString("name").value_or("cluster");
  if (auto dir = fields.OptionalString("profiles")) {
    cluster.profiles_dir = ResolveAgainst(ParentFolder(file), *dir);
  }
  ParseTraining(fields.Map("training"), cluster);

  if (fields.Has("slurm")) cluster.slurm = ParseSlurm(fields.Map("slurm"));
  // Under Slurm the allocation's nodes are the cluster's (OnNodes); `nodes` may be there
  // for launches through agents.
  YAML::Node nodes = read == ClusterRead::kSlurmAllocation && !fields.Has("nodes")
                         ? YAML::Node(YAML::NodeType::Sequence)
                         : fields.List("nodes", "a non-empty list of nodes");
  std::set<std::string> names;
  std::map<std::string, std::string> agents;  // address -> the node it serves
  std::int64_t devices = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string path = "nodes[" + std::to_string(i) + "]";
    cluster.nodes.push_back(ParseNode(YamlFields(nodes[i], file, path)));
    const NodeSpec& node = cluster.nodes.back();
    // Ranks are ints, and a plan lists every one: the count is bounded so that it fits an
    // int and the planner's memory.
    std::int64_t node_devices = 0;
    for (const auto& group : node.devices) node_devices += group.count;
    devices += node_devices;
    if (devices > kMostClusterDevices) {
      throw InputError(file, "nodes",
                       "the cluster has more than " + std::to_string(kMostClusterDevices) + " devices (" +
                           std::to_string(devices) + " by " + path + ")");
    }
    if (!names.insert(node.name).second) throw InputError(file, path + ".name", "'" + node.name + "' is used twice");
    // One agent serves one node: two nodes on one agent would be asked twice for the
    // same devices (and the second launch refused as the job already running).
    if (const auto [other, added] = agents.emplace(node.agent, node.name); !added) {
      throw InputError(file, path + ".agent",
                       "'" + node.agent + "' is also the agent of node '" + other->second +
                           "'; each node has its own agent (host:port)");
    }
  }

  if (fields.Has("credentials")) {
    cluster.credentials = ParseCredentials(fields.Map("credentials"), ParentFolder(file));
  }
  if (fields.Has("job")) cluster.job = ParseJob(fields.Map("job"), ParentFolder(file), cluster.global_batch);

  if (fields.Has("network")) {
    YamlFields network = fields.Map("network");
    if (network.Has("intra_node")) cluster.intra_node = ParseLink(network.Map("intra_node"));
    if (network.Has("inter_node")) cluster.inter_node = ParseLink(network.Map("inter_node"));
    if (auto measured = network.OptionalString("measured")) {
      cluster.measured_network_file = ResolveAgainst(ParentFolder(file), *measured);
    }
    network.Finish();
  } else {
    fields.Child("network");
  }
  // Every key is read: a misspelt one ("netwrok") is named before what its absence means.
  fields.Finish();
  if (read == ClusterRead::kSlurmAllocation) {
    if (!cluster.slurm) fields.Fail("slurm", "is required to launch under Slurm (--slurm): the devices of each node");
    return cluster;
  }
  CheckNetwork(cluster, read);
  return cluster;
}

ClusterSpec OnNodes(ClusterSpec cluster, std::vector<NodeSpec> nodes) {
  cluster.nodes = std::move(nodes);
  CheckNetwork(cluster, ClusterRead::kComplete);
  return cluster;
}

ClusterSpec AtGlobalBatch(ClusterSpec cluster, std::int64_t global_batch) {
  cluster.global_batch = global_batch;
  return cluster;
}

ClusterSpec WithNodes(const ClusterSpec& cluster, const std::vector<std::string>& names) {
  ClusterSpec subset = cluster;
  subset.nodes.clear();
  for (const NodeSpec& node : cluster.nodes) {
    if (std::find(names.begin(), names.end(), node.name) != names.end()) subset.nodes.push_back(node);
  }
  if (subset.nodes.size() != cluster.nodes.size()) {
    subset.measured_network.reset();
    subset.measured_network_file.clear();
  }
  return subset;
}

ClusterSpec LoadClusterFile(const std::string& path, ClusterRead read) {
  return ParseClusterYaml(ReadTextFile(path), path, read);
}

ClusterSpec LoadClusterFileWithNetworkFlag(const std::string& path, const std::string& network_flag) {
  if (network_flag.empty()) return LoadClusterFile(path);
  ClusterSpec cluster = LoadClusterFile(path, ClusterRead::kNetworkElsewhere);
  AttachMeasuredNetwork(cluster, network_flag, "--network", "");
  return cluster;
}

}  // namespace poplar
