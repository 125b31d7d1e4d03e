// The Slurm allocation `poplar launch --slurm` runs in (inside `salloc` or an sbatch
// script): its nodes, the address each is reached at, and the devices each offers, as
// the cluster's nodes. Slurm's own commands answer: `scontrol show hostnames` expands
// SLURM_JOB_NODELIST, `scontrol show node` gives each node's NodeAddr, and one task per
// node (`srun poplar-agent --list-gpus`) lists its GPUs through NVML where the cluster
// file's slurm.gpus is auto.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/cluster/cluster.h"

namespace poplar {

struct SlurmAllocation {
  std::string job_id;                            // SLURM_JOB_ID
  std::vector<std::string> nodes;                // Slurm's node names, in its order
  std::map<std::string, std::string> addresses;  // node -> its NodeAddr
  std::map<std::string, int> cpus;               // node -> the CPUs it holds; empty: unknown
};

// The allocation this process runs in. Throws CommandFailed saying why: not inside one
// (no SLURM_JOB_ID or SLURM_JOB_NODELIST), Slurm's commands missing or failing.
SlurmAllocation CurrentSlurmAllocation();

// SLURM_JOB_CPUS_PER_NODE ("72(x2),36": 72 CPUs on each of the first two nodes, 36 on
// the third) as one count per node, in the allocation's node order. Throws CommandFailed
// quoting `text` when it is malformed or does not cover exactly `nodes` nodes.
std::vector<int> ParseCpusPerNode(const std::string& text, std::size_t nodes);

// The CPUs srun gives each rank of a step placing `ranks` (node -> ranks on it) on nodes
// holding `cpus`: an even share of each node's CPUs, the smallest over the nodes (srun
// gives every task of a step alike). 0 when a node's CPUs are unknown. Throws
// CommandFailed naming a node with fewer CPUs than ranks.
int CpusPerRank(const std::map<std::string, int>& cpus, const std::map<std::string, int>& ranks);

// The absolute path of `name` in PATH. Throws CommandFailed naming it when none is.
std::string FindInPath(const std::string& name);

// One line of `poplar-agent --list-gpus` (JSON): the node, its GPUs, and why it has none.
struct ListedGpu {
  std::string type;
  int index = 0;          // NVML's (PCI bus order)
  std::string uuid = {};  // NVML's ("GPU-..."); empty when NVML gave none
};
struct NodeGpus {
  std::string node;
  std::vector<ListedGpu> gpus;  // in NVML's order
  std::string why_none;
};
// Parses such a line; throws InputError naming `source` and the key.
NodeGpus ParseNodeGpus(const std::string& line, const std::string& source);

// The cluster's nodes on `allocation`: named as Slurm names them, reached at their
// NodeAddr, each with the GPUs `gpus` lists for it (slurm.gpus: auto) and then the
// emulated devices of `slurm`. Throws CommandFailed naming a node that would offer no
// device, with why NVML found none.
std::vector<NodeSpec> AllocationNodes(const SlurmAllocation& allocation, const SlurmSpec& slurm,
                                      const std::vector<NodeGpus>& gpus);

// Each node's GPUs, listed by `agent` (poplar-agent --list-gpus) run as one task per
// node of the allocation by `srun`. Throws CommandFailed with srun's output when it fails.
std::vector<NodeGpus> ListAllocationGpus(const SlurmAllocation& allocation, const std::string& srun,
                                         const std::string& agent);

// A TCP port free on `node` of the allocation, as `agent` (poplar-agent --free-port) run
// there as one task by `srun` finds it. Throws CommandFailed with srun's output when it
// fails or prints no port.
int FreePortOnNode(const std::string& node, const std::string& srun, const std::string& agent);

// Runs `argv` (argv[0] an absolute path) with this process's environment and returns
// what it wrote (stdout and stderr). Throws CommandFailed with that output when it
// cannot start or exits non-zero.
std::string RunToEnd(const std::vector<std::string>& argv);

}  // namespace poplar
