#include "planner/cli/head_agents.h"

#include <filesystem>
#include <iostream>

#include "agent/tls.h"
#include "planner/cli/run_app.h"
#include "planner/input_error.h"
#include "planner/precision.h"
#include "planner/text_file.h"

namespace poplar {

ClusterAgents ClientsFor(const ClusterSpec& cluster) {
  if (!cluster.credentials) {
    throw InputError(cluster.file, "credentials",
                     "is required to reach the agents: {ca, cert, key, token} "
                     "(scripts/make-cluster-credentials makes them)");
  }
  const auto credentials = HeadChannelCredentials(*cluster.credentials, cluster.file);
  ClusterAgents agents;
  for (const auto& node : cluster.nodes) {
    agents.clients.push_back(std::make_unique<AgentClient>(node.name, node.agent, credentials));
  }
  return agents;
}

ClusterAgents ConnectAgents(const ClusterSpec& cluster) {
  ClusterAgents agents = ClientsFor(cluster);
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeSpec& node = cluster.nodes[i];
    v1::DescribeResponse description;
    try {
      description = agents.clients[i]->Describe();
    } catch (const AgentError& error) {
      throw CommandFailed(error.what());
    }
    for (const auto& group : node.devices) {
      int have = 0;
      for (const auto& device : description.devices()) have += device.type() == group.type;
      if (have < group.count) {
        std::string list;
        for (const auto& device : description.devices()) list += (list.empty() ? "" : ", ") + device.type();
        throw CommandFailed("node '" + node.name + "': the cluster file lists " + std::to_string(group.count) +
                            " x " + group.type + " but its agent has " + std::to_string(have) +
                            " (it has: " + (list.empty() ? "no devices" : list) + ")");
      }
    }
  }
  return agents;
}

std::string ModelConfigText(const ClusterSpec& cluster, const std::string& why) {
  if (!cluster.job) {
    throw InputError(cluster.file, "job", "is required " + why + ": {model, data, steps}");
  }
  return ReadTextFile(cluster.job->model_config);
}

std::map<std::string, DeviceProfile> FetchProfiles(const ClusterSpec& cluster, ClusterAgents& agents,
                                                   const std::string& dir, const ProfileRequestOptions& options) {
  const std::string model = ModelConfigText(cluster, "to profile the devices");
  std::filesystem::create_directories(dir);
  std::map<std::string, DeviceProfile> profiles;
  for (const std::string& type : cluster.DeviceTypes()) {
    std::size_t node = 0;
    while (node < cluster.nodes.size()) {
      bool has = false;
      for (const auto& group : cluster.nodes[node].devices) has = has || group.type == type;
      if (has) break;
      ++node;
    }
    AgentClient& agent = *agents.clients.at(node);
    v1::ProfileRequest request;
    request.set_model_config_json(model);
    request.set_device_type(type);
    request.set_precision(WorkerPrecisionName(cluster.precision));
    request.set_repeats(options.repeats);
    request.set_largest_micro_batch(options.largest_micro_batch);
    if (cluster.stage) request.add_stages(*cluster.stage);
    std::string text;
    try {
      text = agent.Profile(request, [&](const v1::ProfileProgress& progress) {
        if (progress.profile_json().empty()) {
          std::cerr << "poplar: [" << agent.node() << " " << type << "] " << progress.line() << "\n";
        }
      });
    } catch (const AgentError& error) {
      throw CommandFailed(error.what());
    }
    const std::string path = (std::filesystem::path(dir) / (type + ".json")).string();
    profiles.emplace(type, ParseProfileJson(text, path));
    WriteFileAtomically(path, text);
  }
  return profiles;
}

}  // namespace poplar
