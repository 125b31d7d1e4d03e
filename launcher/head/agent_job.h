// Running one job on a cluster's agents: a Launch stream per node, their events in
// arrival order, and the job stopped everywhere on the first failure, on Ctrl-C or on
// SIGTERM (the agents are asked to stop it; a node that has not ended it 15 s after the
// job's stop grace, or after 30 s when that is shorter, has its stream cancelled, which
// makes its agent stop it). `poplar launch` (training) and
// `poplar network` (timing the collectives) run their jobs through it.
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "launcher/head/head_agents.h"
#include "launcher/head/launch_monitor.h"
#include "planner/cluster/cluster.h"

namespace poplar {

// "<cluster name>-<what>-YYYYmmdd-HHMMSS" (what may be empty), made a valid job id.
std::string DefaultJobId(const std::string& cluster_name, const std::string& what = "");

struct AgentJobOutcome {
  bool any_started = false;  // a worker ran somewhere (else a refusal: nothing to clean up)
  int signal = 0;            // SIGINT or SIGTERM when the user stopped the job, else 0
};

// Asks every node's agent to check its request (CheckLaunch: nothing written, nothing
// started), all at once. Throws CommandFailed naming every node that refused and why.
void CheckAgentJob(const ClusterSpec& cluster, ClusterAgents& agents, const std::string& job_id,
                   const std::vector<std::pair<std::size_t, v1::LaunchRequest>>& requests);

// Sends each (node index, request) and blocks until every stream has ended. Callers
// check the job on every node first (CheckAgentJob), so that one node's refusal starts
// no worker anywhere. Every event
// goes to `monitor` (Output, Metrics, Failure, Stopped), and each METRICS line also to
// `on_metrics` when given; the monitor decides when the job has failed. Notes on
// stopping go to `out`.
AgentJobOutcome RunAgentJob(const ClusterSpec& cluster, ClusterAgents& agents, const std::string& job_id,
                            const std::vector<std::pair<std::size_t, v1::LaunchRequest>>& requests,
                            LaunchMonitor& monitor, std::ostream& out,
                            const std::function<void(int rank, const std::string& line)>& on_metrics = {});

}  // namespace poplar
