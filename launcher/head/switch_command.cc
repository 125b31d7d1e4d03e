// `poplar switch`: hands a running job a plan that replaces its plan between two steps
// (docs/operations.md, "Plan switches"): the same ranks, ZeRO stage and state shares,
// other micro-batches, and the same global batch or, in a job with an adaptive batch,
// one within its bounds. The plan is checked against the cluster and, where
// its profiles are known (ProfilesOfPlan), against the devices' memory, then sent to the
// agent of rank 0's node, which refuses a plan the job cannot take. The job's `poplar
// launch` shows the step it trains from.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "launcher/head/head_agents.h"
#include "launcher/head/head_commands.h"
#include "planner/base/command_failed.h"
#include "planner/base/input_error.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/cluster/cluster_profiles.h"
#include "planner/formats/worker_plan.h"
#include "planner/search/plan_file.h"

namespace poplar {
namespace {

struct SwitchOptions {
  std::string cluster_file;
  std::string job_id;
  std::string plan_file;
  std::string reason;
};

// `cluster` at the batch of `plan` where the job's adaptive batch bounds hold it: the
// plan is checked and predicted at its own batch.
ClusterSpec AtPlanBatch(ClusterSpec cluster, const WorkerPlan& plan) {
  if (!cluster.job || !cluster.job->settings.batch_min) return cluster;
  const JobSettings& settings = cluster.job->settings;
  if (plan.global_batch < *settings.batch_min || plan.global_batch > *settings.batch_max) {
    throw InputError(plan.file, "global_batch",
                     "is " + std::to_string(plan.global_batch) + ", outside the job's adaptive batch bounds " +
                         std::to_string(*settings.batch_min) + " to " + std::to_string(*settings.batch_max) + " (" +
                         cluster.file + ": job.batch_min, job.batch_max)");
  }
  return AtGlobalBatch(std::move(cluster), plan.global_batch);
}

void RunSwitch(const SwitchOptions& options) {
  std::string text = ReadTextFile(options.plan_file);
  const WorkerPlan plan = ParseWorkerPlan(text, options.plan_file);
  const ClusterSpec cluster = AtPlanBatch(LoadClusterFile(options.cluster_file), plan);
  RequirePlanForCluster(cluster, plan);
  const std::string& rank0_node = plan.placement.at(0).node;
  if (rank0_node.empty()) {
    throw InputError(options.plan_file, plan.RankKey(0) + ".node",
                     "is required: the switch goes to the node of rank 0 (poplar plan writes it)");
  }
  std::string checked = "no profiles to check its micro-batches against";
  if (const std::string dir = ProfilesOfPlan(cluster, options.plan_file); !dir.empty()) {
    // Micro-batches a device cannot hold are refused here; the prediction goes with the
    // plan when it has none, for the launch's report.
    const StepPrediction prediction = PredictPlan(cluster, LoadClusterProfiles(cluster, dir), plan);
    checked =
        "its micro-batches fit the profiles in " + dir + ", predicted " + Seconds(prediction.step_s) + " per step";
    if (!plan.predicted_step_s) {
      nlohmann::ordered_json json = nlohmann::ordered_json::parse(text);
      json["predicted"] = {{"step_s", prediction.step_s}, {"samples_per_s", plan.global_batch / prediction.step_s}};
      text = json.dump(2) + "\n";
    }
  }
  ClusterAgents agents = ClientsFor(cluster);
  AgentClient* agent = nullptr;
  for (auto& client : agents.clients) {
    if (client->node() == rank0_node) agent = client.get();
  }
  if (agent == nullptr) throw InputError(options.plan_file, plan.RankKey(0) + ".node", "is not a node of the cluster");
  try {
    const int number = agent->SwitchPlan(options.job_id, text, options.reason);
    std::cout << "plan " << number << " (" << options.plan_file << ") handed to job " << options.job_id << " on node '"
              << rank0_node << "' (" << checked << "); it trains from the step after the one rank 0 ends next\n";
  } catch (const AgentError& error) {
    throw CommandFailed(std::string("the plan was not switched: ") + error.what());
  }
}

}  // namespace

void RegisterSwitchCommand(CLI::App& app) {
  auto options = std::make_shared<SwitchOptions>();
  CLI::App* command = app.add_subcommand(
      "switch", "Hand a running job a plan that replaces its micro-batches from the next step on (same stage)");
  command->add_option("cluster", options->cluster_file, "Cluster file (YAML)")->required()->check(CLI::ExistingFile);
  command->add_option("--job-id", options->job_id, "The running job")->required()->check(JobIdValidator());
  command
      ->add_option("--plan", options->plan_file,
                   "The plan that takes over: the job's ranks, stage, state shares and global batch (or one "
                   "within job.batch_min and job.batch_max)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--reason", options->reason, "Why, for the launch's progress and run directory")
      ->default_str("switched by hand");
  options->reason = "switched by hand";
  command->callback([options] { RunSwitch(*options); });
}

}  // namespace poplar
