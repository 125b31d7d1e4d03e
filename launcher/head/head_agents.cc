#include "launcher/head/head_agents.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "agent/rpc/grpc_log.h"
#include "agent/rpc/tls.h"
#include "launcher/head/interruption.h"
#include "launcher/head/node_calls.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/formats/model_config.h"
#include "planner/formats/precision.h"

namespace poplar {

ClusterAgents ClientsFor(const ClusterSpec& cluster) {
  if (!cluster.credentials) {
    throw InputError(cluster.file, "credentials",
                     "is required to reach the agents: {ca, cert, key, token} "
                     "(scripts/make-cluster-credentials makes them)");
  }
  const auto credentials = HeadChannelCredentials(*cluster.credentials, cluster.file, "poplar");
  ClusterAgents agents;
  for (const auto& node : cluster.nodes) {
    agents.clients.push_back(std::make_unique<AgentClient>(node.name, node.agent, credentials));
  }
  return agents;
}

int RendezvousPort(const ClusterAgents& agents, const std::string& rank0_node, int requested) {
  if (requested > 0) return requested;
  for (const auto& client : agents.clients) {
    if (client->node() != rank0_node) continue;
    try {
      return client->FreePort();
    } catch (const AgentError& error) {
      throw CommandFailed(std::string(error.what()) + " (or pass --master-port)");
    }
  }
  throw std::logic_error("RendezvousPort: rank 0's node '" + rank0_node + "' has no agent client");
}

v1::DescribeResponse DescribeAgent(AgentClient& client, std::chrono::seconds deadline) {
  GrpcLogCapture log;
  try {
    return client.Describe(deadline);
  } catch (const AgentError& error) {
    if (error.kind() == AgentError::Kind::kTlsHandshake) log.Take();  // the error quotes it; the rest is written out
    if (error.kind() != AgentError::Kind::kUnreachable) throw;
    try {
      return client.Describe(std::min(deadline, std::chrono::seconds(2)), /*wait_for_ready=*/true);
    } catch (const AgentError& again) {
      // Still no connection: the first error says why. An agent that answered this time
      // and refused (our token, the call) says more itself.
      if (again.kind() == AgentError::Kind::kNoAnswer) throw error;
      throw;
    }
  }
}

void CheckVersion(const std::string& node, const v1::DescribeResponse& description) {
  const std::string agent = "poplar-agent " POPLAR_VERSION;
  const std::string worker = "poplar-worker " POPLAR_VERSION " ";  // then "(libtorch ...)"
  const bool same =
      description.agent_version() == agent && description.worker_version().compare(0, worker.size(), worker) == 0;
  if (!same) {
    const auto said = [](const std::string& version) {
      return version.empty() ? std::string("(no version given)") : "'" + Printable(version) + "'";
    };
    throw CommandFailed("node '" + node + "': its agent reports " + said(description.agent_version()) + " and worker " +
                        said(description.worker_version()) + ", this head is poplar " POPLAR_VERSION +
                        ": install poplar " POPLAR_VERSION " (poplar-agent and poplar-worker) on that node");
  }
}

namespace {

// Throws CommandFailed naming the node unless its agent has the devices the cluster file
// lists for it.
void RequireListedDevices(const NodeSpec& node, const v1::DescribeResponse& description) {
  for (const auto& group : node.devices) {
    int have = 0;
    for (const auto& device : description.devices()) have += device.type() == group.type;
    if (have < group.count) {
      const std::string list = Join(description.devices(), ", ", [](const auto& device) { return device.type(); });
      throw CommandFailed("node '" + node.name + "': the cluster file lists " + std::to_string(group.count) + " x " +
                          group.type + " but its agent has " + std::to_string(have) +
                          " (it has: " + (list.empty() ? "no devices" : list) + ")");
    }
  }
}

}  // namespace

ClusterAgents ConnectAgents(const ClusterSpec& cluster) {
  ClusterAgents agents = ClientsFor(cluster);
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeSpec& node = cluster.nodes[i];
    v1::DescribeResponse description;
    try {
      description = DescribeAgent(*agents.clients[i]);
    } catch (const AgentError& error) {
      throw CommandFailed(error.what());
    }
    CheckVersion(node.name, description);
    agents.descriptions.push_back(description);
    RequireListedDevices(node, description);
  }
  return agents;
}

std::vector<std::string> AnsweringNodes(const ClusterSpec& cluster, std::chrono::seconds deadline, std::ostream& out) {
  ClusterAgents agents = ClientsFor(cluster);
  std::vector<std::string> problems(cluster.nodes.size());
  std::vector<v1::DescribeResponse> descriptions(cluster.nodes.size());
  NodeCalls calls(cluster.nodes.size(), [&](std::size_t i) {
    try {
      descriptions[i] = DescribeAgent(*agents.clients[i], deadline);
    } catch (const std::exception& error) {
      problems[i] = error.what();
    }
  });
  calls.Join();
  std::vector<std::string> answering;
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    if (problems[i].empty()) {
      try {
        CheckVersion(cluster.nodes[i].name, descriptions[i]);
        RequireListedDevices(cluster.nodes[i], descriptions[i]);
      } catch (const CommandFailed& error) {
        problems[i] = error.what();
      }
    }
    if (problems[i].empty()) {
      answering.push_back(cluster.nodes[i].name);
    } else {
      out << "  left out: " << problems[i] << std::endl;
    }
  }
  return answering;
}

std::string ModelConfigText(const ClusterSpec& cluster, const std::string& why) {
  if (!cluster.job) {
    throw InputError(cluster.file, "job", "is required " + why + ": {model, data, steps}");
  }
  return LoadJobModel(cluster).text;
}

namespace {

// One device type's profile request, on the first node that has the type.
struct ProfileFetch {
  std::string type;
  AgentClient* agent = nullptr;
  v1::ProfileRequest request;
  std::string text;  // the profile file, once it arrived
};

AgentClient* FirstAgentWith(const ClusterSpec& cluster, ClusterAgents& agents, const std::string& type) {
  for (std::size_t node = 0; node < cluster.nodes.size(); ++node) {
    for (const auto& group : cluster.nodes[node].devices) {
      if (group.type == type) return agents.clients.at(node).get();
    }
  }
  throw std::logic_error("no node has device type " + type);
}

// The types `asked` names, each once, in the order given; all the cluster's when none.
// Throws InputError naming --type for a type the cluster lacks.
std::vector<std::string> TypesToProfile(const ClusterSpec& cluster, const std::vector<std::string>& asked) {
  const std::vector<std::string> all = cluster.DeviceTypes();
  if (asked.empty()) return all;
  std::vector<std::string> types;
  for (const std::string& type : asked) {
    if (std::find(all.begin(), all.end(), type) == all.end()) {
      throw InputError("--type", "",
                       "'" + type + "' is not a device type of " + cluster.file + " (it has " + Join(all, ", ") + ")");
    }
    if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
  }
  return types;
}

}  // namespace

std::map<std::string, DeviceProfile> FetchProfiles(const ClusterSpec& cluster, ClusterAgents& agents,
                                                   const std::string& dir, const ProfileRequestOptions& options) {
  const std::string model = ModelConfigText(cluster, "to profile the devices");
  std::vector<ProfileFetch> fetches;
  for (const std::string& type : TypesToProfile(cluster, options.types)) {
    ProfileFetch fetch;
    fetch.type = type;
    fetch.agent = FirstAgentWith(cluster, agents, type);
    fetch.request.set_model_config_json(model);
    fetch.request.set_device_type(type);
    fetch.request.set_precision(WorkerPrecisionName(cluster.precision));
    fetch.request.set_repeats(options.repeats);
    fetch.request.set_largest_micro_batch(options.largest_micro_batch);
    if (cluster.stage) fetch.request.add_stages(*cluster.stage);
    fetches.push_back(std::move(fetch));
  }

  // Every type at once: a cluster of T types profiles in the time of its slowest, and
  // devices that share a host are measured side by side, as they will train. The first
  // failure cancels the others and is the one reported; so does Ctrl-C (or SIGTERM,
  // SIGHUP), after which the agents stop measuring and nothing is written.
  const Interruption interruption;
  std::mutex mutex;  // guards stderr and `failure`
  std::exception_ptr failure;
  CallCanceller canceller;
  auto fetch_one = [&](std::size_t i) {
    ProfileFetch& fetch = fetches[i];
    try {
      fetch.text = fetch.agent->Profile(
          fetch.request,
          [&](const v1::ProfileProgress& progress) {
            if (!progress.profile_json().empty()) return;
            std::lock_guard<std::mutex> lock(mutex);
            std::cerr << "poplar: [" << fetch.agent->node() << " " << fetch.type << "] " << progress.line() << "\n";
          },
          &canceller);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();  // the others' errors follow from it
      canceller.Cancel();
    }
  };
  int interrupted = NodeCalls(fetches.size(), fetch_one, [&] { canceller.Cancel(); }).JoinUnless(interruption);
  const bool measuring_stopped = interrupted != 0;
  // A signal after the last fetch ended (every profile cached) still stops here.
  if (interrupted == 0) interrupted = interruption.signal();
  if (interrupted != 0) {
    throw CommandFailed("stopped by the user (" + InterruptionName(interrupted) + ") while the agents profiled; " +
                            (measuring_stopped ? "they stopped measuring, and " : "") + "no profile was written",
                        128 + interrupted);
  }
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const AgentError& error) {
      throw CommandFailed(error.what());
    }
  }

  // All or nothing: every profile is checked before any is written.
  std::map<std::string, DeviceProfile> profiles;
  std::vector<std::pair<std::string, const std::string*>> files;
  for (const ProfileFetch& fetch : fetches) {
    const std::string path = (std::filesystem::path(dir) / (fetch.type + ".json")).string();
    profiles.emplace(fetch.type, ParseProfileJson(fetch.text, path));
    files.emplace_back(path, &fetch.text);
  }
  MakeOutputFolder(dir, dir);
  for (const auto& [path, text] : files) WriteFileAtomically(path, *text);
  return profiles;
}

}  // namespace poplar
