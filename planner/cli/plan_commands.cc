// `poplar plan` and `poplar simulate`: planning from profile files, or from the agents.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include "launcher/head/head_agents.h"
#include "planner/base/input_error.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/cli/commands.h"
#include "planner/cluster/cluster_profiles.h"
#include "planner/cluster/precision_choice.h"
#include "planner/formats/worker_plan.h"
#include "planner/search/plan_file.h"
#include "planner/search/plan_report.h"
#include "planner/search/planner.h"

namespace poplar {
namespace {

struct PlanOptions {
  std::string cluster_file;
  std::string profiles_dir;
  std::string output = "plan.json";
  std::string policy = "poplar";
  std::string plan;     // simulate: predict this plan instead of a policy's
  std::string network;  // a measured network file instead of the cluster file's network
  bool json = false;
};

struct LoadedCluster {
  ClusterSpec cluster;
  std::map<std::string, DeviceProfile> profiles;
};

// Offline from profile files when a profile folder is named (--profiles or the cluster
// file's `profiles`); otherwise the agents profile what their caches lack, and the
// profiles are written next to the plan, in <plan folder>/profiles/.
LoadedCluster Load(const PlanOptions& options) {
  LoadedCluster loaded;
  loaded.cluster = LoadClusterFileWithNetworkFlag(options.cluster_file, options.network);
  const std::string dir = options.profiles_dir.empty() ? loaded.cluster.profiles_dir : options.profiles_dir;
  if (!dir.empty()) {
    RequireProfilesFolder(dir, options.profiles_dir.empty() ? options.cluster_file : "--profiles",
                          options.profiles_dir.empty() ? "profiles" : "");
    loaded.profiles = LoadClusterProfiles(loaded.cluster, dir);
    return loaded;
  }
  if (!loaded.cluster.credentials) {
    throw InputError(options.cluster_file, "profiles",
                     "no profile directory and no 'credentials' to ask the agents: pass --profiles DIR, "
                     "set 'profiles' in the cluster file, or add 'credentials' (docs/operations.md)");
  }
  ClusterAgents agents = ConnectAgents(loaded.cluster);
  const std::string fetched = (std::filesystem::path(ParentFolder(options.output)) / "profiles").string();
  loaded.profiles = FetchProfiles(loaded.cluster, agents, fetched, {});
  return loaded;
}

void AddCommonOptions(CLI::App* command, PlanOptions& options) {
  command->add_option("cluster", options.cluster_file, "Cluster file (YAML, see docs/formats.md)")
      ->required()
      ->check(CLI::ExistingFile);
  command
      ->add_option("--profiles", options.profiles_dir,
                   "Folder of profile files <type>.json (default: the cluster file's 'profiles'; "
                   "without either, the agents profile the devices)")
      ->check(CLI::ExistingDirectory);
  command
      ->add_option("--network", options.network,
                   "Network file measured by `poplar network`, instead of the cluster file's 'network'")
      ->check(CLI::ExistingFile);
  command->add_flag("--json", options.json, "Print one JSON document on stdout and nothing else");
}

void RunPlan(const PlanOptions& options) {
  // Before the agents profile: their profiles are written beside the plan.
  RequireFolderFor(options.output, "--output");
  const LoadedCluster loaded = Load(options);
  std::vector<InputFile> inputs = loaded.cluster.InputFiles();
  for (const auto& [type, profile] : loaded.profiles) inputs.push_back({profile.file, "the profile of " + type});
  RequireOutputApart(options.output, inputs, "--output");
  const WorkerPrecisionChoice precision = ChooseWorkerPrecision(loaded.cluster, loaded.profiles);
  const PlanResult result = MakePlan(loaded.cluster, loaded.profiles, Policy::kPoplar);
  const auto plan = PlanToJson(loaded.cluster, loaded.profiles, result);
  WriteFileAtomically(options.output, plan.dump(2) + "\n");
  if (options.json) {
    std::cout << plan.dump(2) << "\n";
    return;
  }
  std::cout << PlanReport(loaded.cluster, result) << "precision: " << precision.reason << "\n"
            << "plan written to " << options.output << "\n";
}

// `simulate --plan`: the cost model's prediction for a given plan file, beside the one
// the plan was written with (its profiles then; these may be newer).
void SimulatePlanFile(const PlanOptions& options, const LoadedCluster& loaded) {
  const WorkerPlan plan = LoadWorkerPlan(options.plan);
  const StepPrediction prediction = PredictPlan(loaded.cluster, loaded.profiles, plan);
  if (options.json) {
    nlohmann::ordered_json document = {{"plan", options.plan},
                                       {"stage", plan.stage},
                                       {"global_batch", plan.global_batch},
                                       {"predicted", PredictionJson(prediction)}};
    if (plan.predicted_step_s) document["when_written"] = {{"step_s", *plan.predicted_step_s}};
    std::cout << document.dump(2) << "\n";
    return;
  }
  std::cout << options.plan << ": stage " << plan.stage << ", global batch " << plan.global_batch << ": "
            << PredictionLine(prediction);
  if (plan.predicted_step_s) {
    const double change = prediction.step_s / *plan.predicted_step_s - 1.0;
    std::cout << "when written, the plan predicted a step of " << Seconds(*plan.predicted_step_s)
              << (std::abs(change) < 0.0005 ? ", the same"
                                            : "; these profiles predict " + Fixed(100.0 * std::abs(change), 1) + " % " +
                                                  (change > 0 ? "more" : "less"))
              << "\n";
  }
}

void RunSimulate(const PlanOptions& options) {
  const LoadedCluster loaded = Load(options);
  if (!options.plan.empty()) {
    SimulatePlanFile(options, loaded);
    return;
  }
  const auto policy = ParsePolicy(options.policy);
  const PlanResult result = MakePlan(loaded.cluster, loaded.profiles, *policy);
  if (options.json) {
    auto plan = PlanToJson(loaded.cluster, loaded.profiles, result);
    nlohmann::ordered_json summary = {{"policy", plan["policy"]},
                                      {"stage", plan["stage"]},
                                      {"global_batch", plan["global_batch"]},
                                      {"predicted", plan["predicted"]},
                                      {"device_types", plan["device_types"]},
                                      {"stages", plan["stages"]}};
    std::cout << summary.dump(2) << "\n";
    return;
  }
  std::cout << PlanReport(loaded.cluster, result);
}

}  // namespace

void RegisterPlanCommand(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand("plan", "Choose the ZeRO stage and per-GPU micro-batches that train fastest");
  AddCommonOptions(command, *options);
  command->add_option("-o,--output", options->output, "Plan file to write")->check(NotEmpty())->capture_default_str();
  command->callback([options] { RunPlan(*options); });
}

void RegisterSimulateCommand(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command =
      app.add_subcommand("simulate", "Predict step time and throughput of a scheduling policy on a cluster");
  AddCommonOptions(command, *options);
  command->add_option("--policy", options->policy, "poplar, uniform (DeepSpeed) or proportional")
      ->check(CLI::IsMember({"poplar", "uniform", "proportional"}))
      ->capture_default_str();
  command
      ->add_option("--plan", options->plan,
                   "Predict this plan file's schedule (its stage and micro-batches) instead of a policy's")
      ->check(CLI::ExistingFile)
      ->excludes("--policy");
  command->callback([options] { RunSimulate(*options); });
}

}  // namespace poplar
