// `poplar launch`: plans if needed, starts every rank through its node's agent, shows
// progress, writes the run directory, and stops the job everywhere on the first
// failure, on Ctrl-C or on SIGTERM.
//
// Run directory (default runs/<job id>; run_directory.h): job_id, plan.json, profiles/
// (when it planned), logs/rank-N.log, metrics/rank-N.jsonl, summary.json, and after a
// resume attempts/N/ with the earlier attempts' plan, profiles and summary.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include "launcher/head/agent_job.h"
#include "launcher/head/batch_chooser.h"
#include "launcher/head/head_agents.h"
#include "launcher/head/head_commands.h"
#include "launcher/head/interruption.h"
#include "launcher/head/launch_monitor.h"
#include "launcher/head/launch_run.h"
#include "launcher/head/node_watch.h"
#include "launcher/head/rebalancer.h"
#include "launcher/head/run_directory.h"
#include "launcher/head/slurm_launch.h"
#include "launcher/head/timeline.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/number_text.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/cluster/cluster_profiles.h"
#include "planner/cluster/precision_choice.h"
#include "planner/formats/job_id.h"
#include "planner/formats/job_settings.h"
#include "planner/formats/lr_schedule.h"
#include "planner/formats/precision.h"
#include "planner/formats/training_limits.h"
#include "planner/formats/worker_plan.h"
#include "planner/search/plan_file.h"
#include "planner/search/plan_report.h"
#include "planner/search/planner.h"

namespace poplar {

namespace fs = std::filesystem;

PreparedPlan PlanFromProfiles(const LaunchOptions& options, const ClusterSpec& cluster,
                              std::map<std::string, DeviceProfile> profiles) {
  PreparedPlan prepared;
  prepared.profiles = std::move(profiles);
  const PlanResult result = MakePlan(cluster, prepared.profiles, *ParsePolicy(options.policy));
  prepared.precision = ChooseWorkerPrecision(cluster, prepared.profiles);
  std::cout << PlanReport(cluster, result) << "precision: " << prepared.precision.reason << "\n" << std::flush;
  prepared.text = PlanToJson(cluster, prepared.profiles, result).dump(2) + "\n";
  prepared.plan = ParseWorkerPlan(prepared.text, "the plan");  // its policy and prediction too
  return prepared;
}

void StopIfInterrupted(const Interruption& interruption, const std::string& job_id) {
  if (const int signal = interruption.signal(); signal != 0) {
    throw CommandFailed("job " + job_id + " was not started: stopped by the user (" + InterruptionName(signal) +
                            "); no worker was started",
                        128 + signal);
  }
}

nlohmann::ordered_json WriteSummary(const LaunchOptions& options, const std::string& run_dir, const std::string& job_id,
                                    const PreparedPlan& prepared, const LaunchMonitor& monitor) {
  nlohmann::ordered_json summary;
  summary["job_id"] = job_id;
  summary["policy"] = prepared.plan.policy.value_or("from file");
  summary["stage"] = prepared.plan.stage;
  summary["ok"] = !monitor.failed();
  const nlohmann::ordered_json measured = monitor.Summary();
  for (const auto& [key, value] : measured.items()) summary[key] = value;
  std::vector<std::string> nodes, types;
  for (const RankPlacement& placement : prepared.plan.placement) {
    nodes.push_back(placement.node);
    types.push_back(placement.device_type);
  }
  const std::vector<RankRecords> records = ReadRankRecords(run_dir, nodes, types);
  summary["stragglers"] = StragglerReport(records, ReadPredictedBusy(run_dir));
  if (options.timeline) {
    WriteFileAtomically((fs::path(run_dir) / "timeline.json").string(), TimelineTrace(job_id, records).dump() + "\n");
  }
  if (monitor.failed()) summary["failure"] = monitor.RootCause();
  WriteFileAtomically((fs::path(run_dir) / "summary.json").string(), summary.dump(2) + "\n");
  return summary;
}

void SayWhatWasTrained(const nlohmann::ordered_json& summary, const JobSpec& job, const std::string& run_dir) {
  if (!summary.contains("first_loss")) {
    std::cout << "no step was trained (the job was already at step " << *job.settings.steps
              << "); run directory: " << run_dir << "\n";
    return;
  }
  const double predicted = summary["predicted_step_s"].get<double>();
  const int plan = summary["plan"].get<int>();
  const std::string of_plan = plan > 0 ? " (plan " + std::to_string(plan) + "'s steps)" : "";
  const std::int64_t first_step = summary["first_step"].get<std::int64_t>();
  const std::int64_t last_step = summary["steps"].get<std::int64_t>();
  std::cout << "trained "
            << (first_step > 1 ? "steps " + std::to_string(first_step) + "-" + std::to_string(last_step)
                               : Count(last_step, "step"))
            << ": loss " << Fixed(summary["first_loss"].get<double>(), 3) << " -> "
            << Fixed(summary["last_loss"].get<double>(), 3)
            << (summary.contains("val_loss") ? ", held-out " + Fixed(summary["val_loss"].get<double>(), 3) : "")
            << "; step " << Seconds(summary["measured_step_s"].get<double>()) << " measured (median) "
            << (predicted > 0 ? "vs " + Seconds(predicted) + " predicted" + of_plan + "; "
                              : "(the plan predicts none); ")
            << Fixed(summary["samples_per_s"].get<double>(), 1) << " samples/s\n";
  // The last plan's straggler: the rank the others wait for.
  if (!summary["stragglers"].empty() && summary["stragglers"].back().contains("straggler")) {
    const nlohmann::ordered_json& last = summary["stragglers"].back();
    const nlohmann::ordered_json& straggler = last["straggler"];
    std::string others;
    for (const auto& [rank, share] : last["idle_share"].items()) {
      if (rank == std::to_string(straggler["rank"].get<int>())) continue;
      others += (others.empty() ? "" : ", ") + ("rank " + rank + " " + Fixed(100 * share.get<double>(), 0) + "%");
    }
    std::cout << "straggler" << of_plan << ": rank " << straggler["rank"].get<int>() << " ("
              << straggler["device_type"].get<std::string>() << " on node " << straggler["node"].get<std::string>()
              << "), idle " << Fixed(100 * straggler["idle_share"].get<double>(), 0) << "% of its steps"
              << (others.empty() ? "" : "; the others idle " + others) << "\n";
  }
  // How far each type's compute is from the plan's prediction: far off, re-profile it.
  if (!summary["stragglers"].empty() && summary["stragglers"].back().contains("busy")) {
    std::vector<std::string> ratios;
    for (const auto& [type, busy] : summary["stragglers"].back()["busy"].items()) {
      ratios.push_back(type + " " + Fixed(busy["ratio"].get<double>(), 2) + "x (" +
                       Seconds(busy["measured_s"].get<double>()) + " vs " + Seconds(busy["predicted_s"].get<double>()) +
                       ")");
    }
    std::cout << "compute per step vs the plan" << of_plan << ": " << Join(ratios, ", ") << "\n";
  }
  std::cout << "run directory: " << run_dir << " (plan.json, logs/, metrics/, summary.json"
            << (std::filesystem::exists(fs::path(run_dir) / "timeline.json") ? ", timeline.json" : "") << ")\n";
}

std::size_t NodeIndex(const ClusterSpec& cluster, const std::string& name) {
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    if (cluster.nodes[i].name == name) return i;
  }
  throw InputError(cluster.file, "nodes", "has no node '" + name + "'");
}

std::optional<Rebalancer> RebalancerFor(const LaunchOptions& options, const ClusterSpec& cluster,
                                        const PreparedPlan& prepared, std::int64_t steps) {
  if (options.rebalance != "on") return std::nullopt;
  if (prepared.profiles.empty()) {
    std::cout << "rebalancing: off (no profiles to compare the devices' speed with)" << std::endl;
    return std::nullopt;
  }
  RebalanceOptions rebalancing = options.rebalancing;
  rebalancing.last_step = steps;
  std::cout << "rebalancing: on (a device type " << Fixed(100 * rebalancing.threshold, 0) << "% off its profile over "
            << rebalancing.window << " steps is re-planned for)" << std::endl;
  return std::make_optional<Rebalancer>(cluster, prepared.profiles, prepared.plan, rebalancing);
}

std::optional<BatchChooser> BatchChooserFor(const ClusterSpec& cluster, const JobSpec& job,
                                            const PreparedPlan& prepared) {
  const JobSettings& settings = job.settings;
  if (settings.batch.value_or("fixed") != "adaptive") return std::nullopt;
  if (prepared.profiles.empty()) {
    throw InputError(cluster.file, "job.batch",
                     "adaptive needs the devices' profiles to predict each batch's speed, and the plan has none "
                     "(plan with poplar plan, or give training.profiles)");
  }
  for (const auto& [key, batch] :
       {std::make_pair("job.batch_min", *settings.batch_min), std::make_pair("job.batch_max", *settings.batch_max)}) {
    try {
      ReplanRunningJob(cluster, prepared.profiles, prepared.plan, batch);
    } catch (const InputError& error) {
      throw InputError(
          cluster.file, key,
          "is " + std::to_string(batch) + ", a batch the plan's stage cannot train here: " + error.reason());
    }
  }
  BatchChoiceOptions options;
  options.batch_min = *settings.batch_min;
  options.batch_max = *settings.batch_max;
  options.every = static_cast<int>(settings.batch_every.value_or(options.every));
  options.last_step = *settings.steps;
  std::cout << "adaptive batch: " << options.batch_min << " to " << options.batch_max
            << " samples, chosen for goodput every " << Count(options.every, "step") << " (from "
            << prepared.plan.global_batch << ")" << std::endl;
  return std::make_optional<BatchChooser>(cluster, prepared.plan, options);
}

namespace {

// A plan checked against profiles fits the devices only if they still have the memory
// the profiles were measured with: a device since given less (a lower emulated cap, a
// card partitioned) ran the worker out of memory. 1% is allowed for NVML's and CUDA's
// slightly different totals.
void RequireDevicesAsProfiled(const ClusterSpec& cluster, const ClusterAgents& agents, const PreparedPlan& plan) {
  constexpr double kMiB = 1 << 20;
  for (std::size_t node = 0; node < cluster.nodes.size(); ++node) {
    for (const auto& device : agents.descriptions.at(node).devices()) {
      const auto profile = plan.profiles.find(device.type());
      if (profile == plan.profiles.end() || device.memory_bytes() >= 0.99 * profile->second.memory_bytes) continue;
      throw CommandFailed("node '" + cluster.nodes[node].name + "': its " + device.type() + " has " +
                          Fixed(device.memory_bytes() / kMiB, 0) + " MiB of memory, but its profile in " +
                          plan.checked_against + " was measured with " + Fixed(profile->second.memory_bytes / kMiB, 0) +
                          " MiB: the plan's micro-batches may not fit. Profile again (poplar plan) and launch "
                          "with the new plan, or launch without --plan");
    }
  }
}

// The plan of --plan, checked against the cluster before any agent is asked.
PreparedPlan PlanFromFile(const LaunchOptions& options, const ClusterSpec& cluster) {
  PreparedPlan prepared;
  prepared.text = ReadTextFile(options.plan_file);
  prepared.plan = ParseWorkerPlan(prepared.text, options.plan_file);
  RequirePlanForCluster(cluster, prepared.plan);
  for (int rank = 0; rank < prepared.plan.WorldSize(); ++rank) {
    // A node given is the cluster's (RequirePlanForCluster); launching needs it given.
    const RankPlacement& placement = prepared.plan.placement[rank];
    const std::string key = prepared.plan.RankKey(rank);
    if (placement.node.empty()) {
      throw InputError(options.plan_file, key + ".node",
                       "is required: the node that runs the rank (poplar plan writes it)");
    }
    if (placement.device_type.empty()) {
      throw InputError(options.plan_file, key + ".device_type",
                       "is required: which of the node's devices runs the rank (poplar plan writes it)");
    }
    if (rank == 0 && placement.host.empty()) {
      throw InputError(options.plan_file, key + ".host",
                       "is required: rank 0's host is the rendezvous (poplar plan writes it)");
    }
  }
  // Micro-batches a device cannot hold (a plan edited by hand, or made for smaller
  // ones) stop the launch here, rather than as a worker's out-of-memory error.
  if (const std::string dir = ProfilesOfPlan(cluster, options.plan_file); !dir.empty()) {
    prepared.profiles = LoadClusterProfiles(cluster, dir);
    const StepPrediction prediction = PredictPlan(cluster, prepared.profiles, prepared.plan);
    if (!prepared.plan.predicted_step_s) prepared.plan.predicted_step_s = prediction.step_s;
    prepared.checked_against = dir;
  }
  prepared.precision = ChooseWorkerPrecision(cluster, prepared.profiles);
  return prepared;
}

// A plan made now: the agents profile their devices, and the planner searches.
PreparedPlan PlanThroughAgents(const LaunchOptions& options, const ClusterSpec& cluster, ClusterAgents& agents,
                               const std::string& run_dir) {
  return PlanFromProfiles(options, cluster,
                          FetchProfiles(cluster, agents, (fs::path(run_dir) / "profiles").string(), {}));
}

// The cluster file's job, with --steps applied.
JobSpec JobOf(const LaunchOptions& options, const ClusterSpec& cluster) {
  JobSpec job = *cluster.job;
  if (options.steps > 0) {
    job.settings.steps = options.steps;
    // A decay over the job's steps may have none left. One that ends at them moves with
    // --steps: the worker that reads the checkpoint then warns, with the rates it changes.
    ScheduleOf(job, cluster.file, "--steps");
  }
  return job;
}

// --job-id, checked, or a new id from the cluster's name and the time.
std::string JobIdOf(const LaunchOptions& options, const ClusterSpec& cluster) {
  const std::string job_id = options.job_id.empty() ? DefaultJobId(cluster.name) : options.job_id;
  try {
    CheckJobId(job_id);
  } catch (const InputError& error) {
    throw InputError("--job-id", "", error.reason());
  }
  return job_id;
}

void SayWhichPlanIsFollowed(const LaunchOptions& options, const PreparedPlan& given) {
  std::cout << "following " << options.plan_file << " (" << given.plan.policy.value_or("from file") << ", stage "
            << given.plan.stage << "); "
            << (given.checked_against.empty()
                    ? std::string("no profiles to check its micro-batches against (no 'profiles' in the cluster "
                                  "file, no profiles/ beside the plan)")
                    : "its micro-batches fit the profiles in " + given.checked_against)
            << std::endl;
}

// The cluster's nodes that run ranks of `ranks`, in cluster order.
std::vector<std::size_t> NodesInJob(const ClusterSpec& cluster, const std::vector<RankInfo>& ranks) {
  std::vector<std::size_t> nodes;
  for (std::size_t i = 0; i < cluster.nodes.size(); ++i) {
    const auto runs_here = [&](const RankInfo& rank) { return rank.node == cluster.nodes[i].name; };
    if (std::any_of(ranks.begin(), ranks.end(), runs_here)) nodes.push_back(i);
  }
  return nodes;
}

v1::LaunchRequest LaunchRequestFor(const std::string& node, const JobPlace& place, const JobSpec& job,
                                   const LaunchOptions& options, const Resumption& resumption) {
  v1::LaunchRequest request;
  request.set_job_id(place.job_id);
  request.set_node(node);
  request.set_plan_json(place.plan_text);
  request.set_model_config_json(place.model);
  request.set_master_addr(place.master_addr);
  request.set_master_port(place.master_port);
  request.set_precision(place.precision);
  for (const auto& [key, text] : JobSettingTexts(job.settings)) (*request.mutable_settings())[key] = text;
  request.set_trace_step(options.trace_step);
  request.set_timeout_s(options.timeout_s);
  request.set_resume(resumption.resume);
  request.set_require_checkpoint(resumption.require_checkpoint);
  return request;
}

// What one attempt of the job ended with: its agents' outcome, and what the monitor saw.
struct AttemptEnd {
  AgentJobOutcome outcome;
  std::unique_ptr<LaunchMonitor> monitor;
};

// One attempt of the job: `prepared`'s ranks started on `cluster` (the nodes of `whole`
// that answered) through `agents`, and followed (progress, rebalancing) until every
// node's stream has ended. With --elastic, nodes of `whole` left out are watched; one
// that answers again is taken back after the next checkpoint (the attempt then ends
// with TakeBack).
AttemptEnd RunAttempt(const LaunchOptions& options, const ClusterSpec& whole, const ClusterSpec& cluster,
                      ClusterAgents& agents, JobPlace& place, const JobSpec& job, const PreparedPlan& prepared,
                      const std::string& run_dir, const Interruption& interruption, const Resumption& resumption) {
  const std::string& job_id = place.job_id;
  place.plan_text = prepared.text;
  place.precision = prepared.precision.name;
  WriteFileAtomically((fs::path(run_dir) / "plan.json").string(), place.plan_text);
  std::vector<RankInfo> ranks;
  for (const RankPlacement& placement : prepared.plan.placement) {
    ranks.push_back({placement.node, placement.device_type});
  }
  const std::vector<std::size_t> nodes_in_job = NodesInJob(cluster, ranks);
  place.master_addr = prepared.plan.placement.at(0).host;
  place.master_port = RendezvousPort(agents, prepared.plan.placement.at(0).node, options.master_port);
  std::vector<std::pair<std::size_t, v1::LaunchRequest>> requests;
  for (std::size_t node : nodes_in_job) {
    requests.emplace_back(node, LaunchRequestFor(cluster.nodes[node].name, place, job, options, resumption));
  }
  CheckAgentJob(cluster, agents, job_id, requests);
  StopIfInterrupted(interruption, job_id);
  std::cout << "launching job " << job_id << ": " << Count(ranks.size(), "rank") << " on "
            << Count(nodes_in_job.size(), "node") << ", " << Count(*job.settings.steps, "step") << "; rendezvous "
            << place.master_addr << ":" << place.master_port << "; run directory " << run_dir << std::endl;
  AttemptEnd end;
  end.monitor = std::make_unique<LaunchMonitor>(run_dir, ranks, *job.settings.steps, options.progress_every, std::cout);
  LaunchMonitor& monitor = *end.monitor;
  monitor.StartingPlan(prepared.plan.predicted_step_s);
  if (resumption.resume) monitor.ExpectResume(job_id);
  std::optional<Rebalancer> rebalancer = RebalancerFor(options, cluster, prepared, *job.settings.steps);
  AgentClient& rank0_agent = *agents.clients.at(NodeIndex(cluster, prepared.plan.placement.at(0).node));
  std::vector<std::string> left_out;
  for (const NodeSpec& node : whole.nodes) {
    const auto in_job = [&](const NodeSpec& other) { return other.name == node.name; };
    if (std::none_of(cluster.nodes.begin(), cluster.nodes.end(), in_job)) left_out.push_back(node.name);
  }
  std::optional<NodeWatch> watch;
  if (options.elastic && !left_out.empty()) watch.emplace(WithNodes(whole, left_out), std::chrono::seconds(3));
  const std::int64_t checkpoint_every = job.settings.checkpoint_every.value_or(0);
  bool taking_back = false;
  // Rank 0 reports step S + 1 once it has started writing the checkpoint of step S, which
  // a stop lets it finish: the node is taken back then, one step lost at most.
  const auto take_back = [&](int rank, const nlohmann::json& record) {
    if (!watch || taking_back || rank != 0 || checkpoint_every <= 0 || !record.is_object()) return;
    const std::int64_t step = record.value("step", std::int64_t{0});
    if (step < 2 || (step - 1) % checkpoint_every != 0 || step >= *job.settings.steps) return;
    const std::vector<std::string> back = watch->answering();
    if (back.empty()) return;
    taking_back = true;
    monitor.TakingBack("node '" + Join(back, "', '") + "' answers again: taken back after the checkpoint of step " +
                       std::to_string(step - 1));
  };
  // Hands rank 0 a proposed plan; its number, or none when the agent refused it.
  const auto hand = [&](const std::string& plan_text, const std::string& reason,
                        const std::string& proposer) -> std::optional<int> {
    try {
      return rank0_agent.SwitchPlan(job_id, plan_text, reason);
    } catch (const AgentError& error) {
      std::cout << proposer << ": the new plan was not handed to rank 0: " << error.what() << std::endl;
      return std::nullopt;
    }
  };
  PlanProposers proposers(std::move(rebalancer), BatchChooserFor(cluster, job, prepared), prepared, run_dir, hand);
  const auto follow = [&](int rank, const std::string& line) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    take_back(rank, record);
    if (!taking_back) proposers.Metrics(rank, record);
  };
  end.outcome = RunAgentJob(cluster, agents, job_id, requests, monitor, std::cout, follow);
  return end;
}

// A plan for the nodes of `cluster` (other than the attempt before had): from the
// profiles the job already has (`known`, by type) when they cover its types, else
// through the agents.
PreparedPlan Replan(const LaunchOptions& options, const ClusterSpec& cluster, ClusterAgents& agents,
                    const std::map<std::string, DeviceProfile>& known, const std::string& run_dir) {
  const std::vector<std::string> types = cluster.DeviceTypes();
  const auto profiled = [&](const std::string& type) { return known.count(type) > 0; };
  if (!std::all_of(types.begin(), types.end(), profiled)) return PlanThroughAgents(options, cluster, agents, run_dir);
  std::map<std::string, DeviceProfile> profiles;
  for (const std::string& type : types) profiles[type] = known.at(type);
  return PlanFromProfiles(options, cluster, std::move(profiles));
}

// `before` with the plan file `text` (a plan a switch handed rank 0) in its place: the
// same profiles and precision; each rank's node, host and device type from `before`
// where `text` leaves them out (a switch may: they cannot change); its prediction from
// the profiles when it states none.
PreparedPlan WithPlan(const ClusterSpec& cluster, PreparedPlan before, const std::string& text,
                      const std::string& what) {
  ParseWorkerPlan(text, what);  // as the agent checked it when it was handed
  nlohmann::ordered_json plan = nlohmann::ordered_json::parse(text);
  for (auto& rank : plan["ranks"]) {
    const std::size_t number = rank.value("rank", std::size_t{0});
    if (number >= before.plan.placement.size()) continue;
    const RankPlacement& placed = before.plan.placement[number];
    for (const auto& [key, value] :
         {std::pair{"node", &placed.node}, {"host", &placed.host}, {"device_type", &placed.device_type}}) {
      if (!rank.contains(key) && !value->empty()) rank[key] = *value;
    }
  }
  before.text = plan.dump(2) + "\n";
  before.plan = ParseWorkerPlan(before.text, what);
  if (!before.plan.predicted_step_s && !before.profiles.empty()) {
    before.plan.predicted_step_s = PredictPlan(cluster, before.profiles, before.plan).step_s;
  }
  return before;
}

// How an attempt ends the launch, or goes on: trained; stopped to take a node back
// (--elastic); failed with restarts left (--elastic, not the user's stop); or given up.
enum class Ending { kTrained, kTakeBack, kRestart, kGiveUp };

Ending EndingOf(const LaunchOptions& options, const AttemptEnd& end, int restarts) {
  const LaunchMonitor& monitor = *end.monitor;
  if (!monitor.failed()) return Ending::kTrained;
  if (end.outcome.signal != 0 || !monitor.UserStop().empty()) return Ending::kGiveUp;
  if (!monitor.TakeBack().empty()) return Ending::kTakeBack;
  if (!options.elastic || restarts >= options.max_restarts) return Ending::kGiveUp;
  return Ending::kRestart;
}

void RunLaunch(const LaunchOptions& options) {
  // Ctrl-C, SIGTERM and SIGHUP end the launch in order from here on: before the workers
  // start at the next step (StopIfInterrupted), then by stopping them (RunAgentJob).
  const Interruption interruption;
  std::optional<SummaryOnStdout> json;
  if (options.json) json.emplace();
  std::optional<SlurmPlace> slurm;
  if (options.slurm) slurm.emplace();
  const ClusterSpec cluster = slurm ? SlurmCluster(options, *slurm)
                                    : LoadClusterFileWithNetworkFlag(options.cluster_file, options.network_file);
  JobPlace place;
  place.model = ModelConfigText(cluster, "by poplar launch");
  const JobSpec job = JobOf(options, cluster);
  place.job_id = JobIdOf(options, cluster);
  const std::string& job_id = place.job_id;
  const std::string run_dir = options.run_dir.empty() ? (fs::path("runs") / job_id).string() : options.run_dir;
  RequirePathFits(run_dir, "--run-dir");
  RunDirectory directory(run_dir, job_id, options.resume);
  std::optional<PreparedPlan> given;
  if (!options.plan_file.empty()) {
    given = PlanFromFile(options, cluster);
    SayWhichPlanIsFollowed(options, *given);
  }
  if (slurm)
    return RunUnderSlurm({options, interruption, json, cluster, place, job, run_dir, directory, given}, *slurm);

  ClusterAgents agents = ConnectAgents(cluster);
  if (given) RequireDevicesAsProfiled(cluster, agents, *given);
  StopIfInterrupted(interruption, job_id);
  const std::string previous_attempt = options.resume ? directory.KeepPreviousAttempt() : "";
  directory.Record();
  PreparedPlan prepared = given ? *std::move(given) : PlanThroughAgents(options, cluster, agents, run_dir);
  StopIfInterrupted(interruption, job_id);
  const std::int64_t checkpoint_every = job.settings.checkpoint_every.value_or(0);
  ClusterSpec current = cluster;                                   // the nodes of this attempt
  std::map<std::string, DeviceProfile> known = prepared.profiles;  // every profile the job has had
  Resumption resumption{options.resume, false};
  for (int restarts = 0, attempt = 0;; ++attempt) {
    const AttemptEnd end =
        RunAttempt(options, cluster, current, agents, place, job, prepared, run_dir, interruption, resumption);
    const LaunchMonitor& monitor = *end.monitor;
    const int exit_status = end.outcome.signal != 0 ? 128 + end.outcome.signal : 1;
    // A first launch every agent refused leaves the run directory as it was (RunDirectory).
    if (attempt == 0 && !end.outcome.any_started && monitor.failed()) {
      throw CommandFailed("job " + job_id + " failed: " + monitor.RootCause() + "; no worker was started", exit_status);
    }
    directory.Keep();
    if (attempt == 0 && !previous_attempt.empty()) {
      std::cout << "the previous attempt's plan and summary are kept in " << previous_attempt << "\n";
    }
    const nlohmann::ordered_json summary = WriteSummary(options, run_dir, job_id, prepared, monitor);
    const Ending ending = EndingOf(options, end, restarts);
    if (json && (ending == Ending::kTrained || ending == Ending::kGiveUp)) json->Print(summary);
    if (ending == Ending::kTrained) return SayWhatWasTrained(summary, job, run_dir);
    // The user's own stop is not a failure of the job's (unless one came first), nor is
    // taking a node back.
    const std::string user_stop = monitor.UserStop();
    const std::string what = user_stop.empty() ? "failed: " + monitor.RootCause() : "was " + user_stop;
    const std::string kept =
        monitor.CheckpointsKept(checkpoint_every, "the agents' work directories under jobs/" + job_id +
                                                      "/checkpoints (rank 0's node writes them), or their shared_dir");
    if (ending == Ending::kGiveUp) {
      const std::string elastic = options.elastic && user_stop.empty() && end.outcome.signal == 0
                                      ? " (after " + Count(restarts, "restart") + ", --max-restarts " +
                                            std::to_string(options.max_restarts) + ")"
                                      : "";
      throw CommandFailed("job " + job_id + " " + what + elastic + "; every worker was stopped; " + kept +
                              "; logs in " + run_dir + "/logs",
                          exit_status);
    }
    if (ending == Ending::kTakeBack) {
      std::cout << "elastic: job " << job_id << " stopped: " << monitor.TakeBack() << std::endl;
    } else {
      ++restarts;
      std::cout << "elastic: job " << job_id << " " << what << "; restart " << restarts << " of "
                << options.max_restarts << ": re-planning over the nodes whose agents answer" << std::endl;
    }
    // Elastic: on from the newest checkpoint, over the nodes whose agents answer. Once a
    // checkpoint was due (or the job had resumed), starting over from step 0 is refused.
    resumption = {true, resumption.require_checkpoint || monitor.CheckpointDue(checkpoint_every)};
    const std::string kept_in = directory.KeepPreviousAttempt();
    if (!kept_in.empty()) std::cout << "the failed attempt's plan and summary are kept in " << kept_in << "\n";
    StopIfInterrupted(interruption, job_id);
    const std::vector<std::string> answering = AnsweringNodes(cluster, std::chrono::seconds(5), std::cout);
    if (answering.empty()) {
      if (json) json->Print(summary);
      throw CommandFailed("job " + job_id + " " + what + "; no node's agent answers to go on with; " + kept,
                          exit_status);
    }
    ClusterSpec next = WithNodes(cluster, answering);
    // An adaptive batch goes on at the batch it last trained, not the cluster file's.
    if (job.settings.batch.value_or("fixed") == "adaptive") {
      next.global_batch = monitor.LastGlobalBatch().value_or(prepared.plan.global_batch);
    }
    agents = ConnectAgents(next);
    const auto same_node = [](const NodeSpec& a, const NodeSpec& b) { return a.name == b.name; };
    const bool same_nodes =
        std::equal(next.nodes.begin(), next.nodes.end(), current.nodes.begin(), current.nodes.end(), same_node);
    // On the same nodes the job goes on with the plan it last trained, which a switch
    // (rebalancing, an adaptive batch, poplar switch) made for what the head had seen;
    // on others it is planned again, at the batch it last trained.
    const bool batch_moved = next.global_batch != prepared.plan.global_batch;
    if (const auto trained = monitor.PlanTrained(); same_nodes && trained) {
      prepared = WithPlan(next, std::move(prepared), trained->second, "plan " + std::to_string(trained->first));
      std::cout << "elastic: the job goes on with plan " << trained->first << ", the last it trained (batch "
                << prepared.plan.global_batch << ")" << std::endl;
      next.global_batch = prepared.plan.global_batch;
    } else if (!same_nodes || batch_moved) {
      if (batch_moved) {
        std::cout << "adaptive batch: the job goes on at batch " << next.global_batch << ", the last it trained"
                  << std::endl;
      }
      prepared = Replan(options, next, agents, known, run_dir);
      known.insert(prepared.profiles.begin(), prepared.profiles.end());
    }
    current = next;
  }
}

}  // namespace

CLI::Validator JobIdValidator() {
  return CLI::Validator(
      [](std::string& text) {
        try {
          CheckJobId(text);
          return std::string();
        } catch (const InputError& error) {
          return error.reason();
        }
      },
      "JOB_ID");
}

void RegisterLaunchCommand(CLI::App& app) {
  auto options = std::make_shared<LaunchOptions>();
  CLI::App* command =
      app.add_subcommand("launch", "Train the cluster file's job on every node through the agents, following a plan");
  command->add_option("cluster", options->cluster_file, "Cluster file (YAML, with a 'job' section)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--plan", options->plan_file, "Plan file to follow (default: plan now, through the agents)")
      ->check(CLI::ExistingFile);
  command->add_option("--policy", options->policy, "When planning: poplar, uniform (DeepSpeed) or proportional")
      ->check(CLI::IsMember({"poplar", "uniform", "proportional"}))
      ->capture_default_str()
      ->excludes("--plan");  // a plan given is followed; its policy is the plan's
  command
      ->add_option(
          "--network", options->network_file,
          "When planning: a network file measured by `poplar network`, instead of the cluster file's 'network'")
      ->check(CLI::ExistingFile)
      ->excludes("--plan");
  command->add_option("--steps", options->steps, "Train until this step (default: the cluster file's job.steps)")
      ->check(WholeNumberIn(std::int64_t{1}, std::int64_t{1} << 40));
  command->add_option("--run-dir", options->run_dir, "Run directory (default: runs/<job id>)")->check(NotEmpty());
  auto* job_id =
      command->add_option("--job-id", options->job_id, "Job name on every node (default: <cluster name>-<time>)")
          ->check(JobIdValidator());
  AddRendezvousOptions(command, options->master_port, options->timeout_s);
  command->add_option("--progress-every", options->progress_every, "Progress line every N steps (0: none)")
      ->check(WholeNumberIn(0, 1 << 30))
      ->capture_default_str();
  command
      ->add_option("--trace-step", options->trace_step,
                   "Profile this step of the run on every rank (the N-th it takes): each node keeps its ranks' "
                   "traces in <work_dir>/jobs/<job id>/traces/rank-R.json")
      ->check(WholeNumberIn(std::int64_t{1}, kMostJobSteps));
  command
      ->add_option("--rebalance", options->rebalance,
                   "Re-plan for device types that compute slower or faster than profiled, and switch to the new "
                   "plan between steps (where the plan's profiles are known)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  command
      ->add_option("--rebalance-window", options->rebalancing.window,
                   "Steps of a plan measured before a device type is judged")
      ->check(WholeNumberIn(2, 1 << 20))
      ->capture_default_str();
  command
      ->add_option("--rebalance-threshold", options->rebalancing.threshold,
                   "How far off its profile (a fraction) a device type's compute must be to be corrected")
      ->check(NumberWhere([](double v) { return v > 0 && v <= 10; }, "a fraction above 0, at most 10"))
      ->capture_default_str();
  command->add_flag("--timeline", options->timeline,
                    "Write the run directory's timeline.json: every rank's steps on one clock, a Chrome trace "
                    "(open it in ui.perfetto.dev)");
  command->add_flag("--json", options->json,
                    "Print the run's summary (summary.json) as one JSON document on stdout; progress goes to stderr");
  command->add_flag("--elastic", options->elastic,
                    "After a failure (a rank, an agent or a node lost), re-plan over the nodes whose agents answer and "
                    "go on from the newest checkpoint");
  auto* slurm = command->add_flag(
      "--slurm", options->slurm,
      "Inside a Slurm allocation (salloc, sbatch): train on its nodes, with the devices of the cluster file's "
      "`slurm` section, as one srun step; no agents (docs/operations.md, \"Running under Slurm\")");
  command
      ->add_option("--worker", options->worker,
                   "With --slurm: poplar-worker's path on every node (default: the one beside poplar)")
      ->needs(slurm)
      ->check(CLI::ExistingFile);
  // Slurm requeues and restarts jobs itself (sbatch --requeue); a run resumes with --resume.
  slurm->excludes("--elastic");
  slurm->excludes("--network");
  command->add_option("--max-restarts", options->max_restarts, "With --elastic: restarts before the launch gives up")
      ->check(WholeNumberIn(0, 1000))
      ->capture_default_str();
  // Without the job's id a resume would start a new job (the default id is new each time).
  command->add_flag("--resume", options->resume, "Resume the job --job-id names from its last checkpoint")
      ->needs(job_id);
  command->callback([options] { RunLaunch(*options); });
}

}  // namespace poplar
