// `poplar launch --slurm` (docs/operations.md, "Running under Slurm"): the cluster on a
// Slurm allocation's nodes, profiles through srun, and every rank as one srun step
// (slurm_allocation.h, srun_step.h), followed as a launch through agents is (launch_run.h).
#pragma once

#include <string>
#include <vector>

#include "launcher/head/launch_run.h"
#include "launcher/head/slurm_allocation.h"
#include "planner/cluster/cluster.h"

namespace poplar {

// What the Slurm path knows of the allocation: its nodes' devices, and the programs.
struct SlurmPlace {
  SlurmAllocation allocation;
  std::vector<NodeGpus> gpus;  // slurm.gpus: auto
  std::string srun;
  std::string worker;
};

// The cluster file under Slurm: its `slurm` section's devices on the allocation's nodes.
// The file is read first, so that a broken one is named before Slurm is asked anything.
ClusterSpec SlurmCluster(const LaunchOptions& options, SlurmPlace& place);

// A launch under Slurm: one attempt, as one srun step (--elastic is refused: Slurm
// requeues the job).
void RunUnderSlurm(const LaunchStart& start, const SlurmPlace& place);

}  // namespace poplar
