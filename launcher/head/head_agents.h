// The head node's view of a cluster's agents: connecting to each node's poplar-agent
// with the cluster's credentials, checking that it has the devices the cluster file
// lists, and fetching profiles from them. Used by `poplar profile|plan|launch|status`.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "agent/client/agent_client.h"
#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"

namespace poplar {

struct ClusterAgents {
  std::vector<std::unique_ptr<AgentClient>> clients;  // one per node, in cluster order
  std::vector<v1::DescribeResponse> descriptions;     // ConnectAgents: each node's devices
};

// Clients for every node (no call made yet). Throws InputError if the cluster file has
// no `credentials` or they cannot be read.
ClusterAgents ClientsFor(const ClusterSpec& cluster);

// The agent's Describe. An agent unreachable at the first try is asked once more, waiting
// up to 2 s (within `deadline`) for a connection: a connection attempt can fail on the way
// (a TLS session not set up, an agent restarting under systemd); if that gets no answer
// either, the first error is thrown. gRPC's own log line about a failed TLS handshake is held back:
// the AgentError already quotes it (every other line is written out as usual).
v1::DescribeResponse DescribeAgent(AgentClient& client, std::chrono::seconds deadline = std::chrono::seconds(10));

// Throws CommandFailed naming `node` unless its agent and the worker beside it are of
// this poplar's version: the head, agents and workers speak one protocol and one job
// contract, so a node on another version is refused before anything starts there.
void CheckVersion(const std::string& node, const v1::DescribeResponse& description);

// Connects to every agent and checks each node runs this poplar's version
// (CheckVersion) and has at least the devices the cluster file lists for it. Throws
// CommandFailed naming the node and the reason.
ClusterAgents ConnectAgents(const ClusterSpec& cluster);

// The names of the cluster's nodes whose agents answer now (Describe within `deadline`,
// all asked at once), of this poplar's version (CheckVersion), with at least the devices
// the cluster file lists; in cluster order. Each node left out, and why, goes to `out`.
std::vector<std::string> AnsweringNodes(const ClusterSpec& cluster, std::chrono::seconds deadline, std::ostream& out);

// The rendezvous port of a job whose rank 0 runs on node `rank0_node`: `requested` if
// given (> 0), else a port that node's agent finds free. Throws CommandFailed naming
// the node if its agent cannot say.
int RendezvousPort(const ClusterAgents& agents, const std::string& rank0_node, int requested);

// The JSON text of the cluster's job.model, checked as the worker will check it
// (planner/formats/model_config.h). Throws InputError naming the model file and key, or the
// cluster file if there is no job.
std::string ModelConfigText(const ClusterSpec& cluster, const std::string& why);

struct ProfileRequestOptions {
  int repeats = 0;                 // 0: the worker's default
  int largest_micro_batch = 0;     // 0: the worker's default
  std::vector<std::string> types;  // device types to profile; empty: every type
};

// Profiles every device type of the cluster (or those options.types names: an
// InputError unless the cluster has them) on the first node that has it, all types at
// once (agents reuse cached stages), writes DIR/<type>.json and returns the profiles.
// Progress goes to stderr, each line labelled with node and type. The first failure
// cancels the other requests; nothing is written then.
std::map<std::string, DeviceProfile> FetchProfiles(const ClusterSpec& cluster, ClusterAgents& agents,
                                                   const std::string& dir, const ProfileRequestOptions& options);

}  // namespace poplar
