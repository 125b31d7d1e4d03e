// `poplar profile` and `poplar status`: the head node asking the cluster's agents.
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/head/head_agents.h"
#include "launcher/head/head_commands.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"

namespace poplar {
namespace {

struct ProfileOptions {
  std::string cluster_file;
  std::string output;
  ProfileRequestOptions request;
  bool json = false;
};

void RunProfile(const ProfileOptions& options) {
  const ClusterSpec cluster = LoadClusterFile(options.cluster_file, ClusterRead::kNetworkElsewhere);
  const std::string dir = !options.output.empty()         ? options.output
                          : !cluster.profiles_dir.empty() ? cluster.profiles_dir
                                                          : "profiles";
  // Checked before measuring, which takes minutes: a file where the folder should be.
  RequirePathFits(dir, options.output.empty() ? cluster.file + ": profiles" : "--output");
  std::error_code error;
  if (std::filesystem::exists(dir, error) && !std::filesystem::is_directory(dir, error)) {
    throw InputError(options.output.empty() ? cluster.file : "--output", options.output.empty() ? "profiles" : "",
                     dir + " is a file, not a folder for the profiles");
  }
  ModelConfigText(cluster, "to profile the devices");  // a bad model is named before agents are asked
  ClusterAgents agents = ConnectAgents(cluster);
  const auto profiles = FetchProfiles(cluster, agents, dir, options.request);
  if (options.json) {
    nlohmann::ordered_json document = {{"dir", dir}, {"profiles", nlohmann::ordered_json::array()}};
    for (const auto& [type, profile] : profiles) {
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      for (const auto& stage : profile.stages) {
        stages.push_back({{"stage", stage.stage},
                          {"state_share", stage.HeldShare()},
                          {"max_micro_batch", stage.max_micro_batch},
                          {"compute_at_largest_s", stage.points.back().compute_s}});
      }
      document["profiles"].push_back({{"device_type", type},
                                      {"emulated", profile.emulated},
                                      {"memory_bytes", profile.memory_bytes},
                                      {"file", (std::filesystem::path(dir) / (type + ".json")).string()},
                                      {"stages", stages}});
    }
    std::cout << document.dump(2) << "\n";
    return;
  }
  TextTable table(
      {"device type", "emulated", "memory", "stage", "state held", "largest micro-batch", "compute at largest"},
      {false, false, true, true, true, true, true});
  for (const auto& [type, profile] : profiles) {
    for (const auto& stage : profile.stages) {
      table.AddRow({type, profile.emulated ? "yes" : "no", GiB(static_cast<double>(profile.memory_bytes)),
                    std::to_string(stage.stage), HeldShareText(stage.HeldShare()),
                    std::to_string(stage.max_micro_batch), Seconds(stage.points.back().compute_s)});
    }
  }
  std::cout << table.Render() << "profiles written to " << dir << "/\n";
}

struct StatusOptions {
  std::string cluster_file;
  bool json = false;
};

// A node's entry of `poplar status --json`.
nlohmann::ordered_json NodeStatusJson(const AgentClient& client, const std::string& state,
                                      const v1::DescribeResponse* description, const v1::StatusResponse* status,
                                      const std::string& reason) {
  nlohmann::ordered_json node = {{"node", client.node()}, {"agent", client.address()}, {"state", state}};
  if (!reason.empty()) node["reason"] = reason;
  node["devices"] = nlohmann::ordered_json::array();
  node["jobs"] = nlohmann::ordered_json::array();
  if (description != nullptr) {
    for (const auto& device : description->devices()) {
      node["devices"].push_back({{"type", device.type()},
                                 {"index", device.index()},
                                 {"memory_bytes", device.memory_bytes()},
                                 {"emulated", device.emulated()}});
    }
  }
  if (status != nullptr) {
    for (const auto& job : status->jobs()) {
      node["jobs"].push_back({{"job_id", job.job_id()},
                              {"ranks", std::vector<int>(job.ranks().begin(), job.ranks().end())},
                              {"devices", std::vector<std::string>(job.devices().begin(), job.devices().end())},
                              {"step", job.step()},
                              {"seconds", job.seconds()}});
    }
  }
  return node;
}

void RunStatus(const StatusOptions& options) {
  // Status asks the agents only: the network (declared links) is not needed.
  const ClusterSpec cluster = LoadClusterFile(options.cluster_file, ClusterRead::kNetworkElsewhere);
  ClusterAgents agents = ClientsFor(cluster);
  TextTable table({"node", "agent", "state", "devices", "jobs"}, {false, false, false, false, false});
  std::vector<std::string> reasons;                                // why each DOWN node is down, under the table
  std::vector<std::string> versions;                               // each node on another version, under the table
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();  // --json
  for (auto& client : agents.clients) {
    try {
      const auto description = DescribeAgent(*client, std::chrono::seconds(5));
      const auto status = client->Status(std::chrono::seconds(5));
      std::map<std::string, int> counts;
      for (const auto& device : description.devices()) {
        counts[device.type() + (device.emulated() ? " (emulated)" : "")] += 1;
      }
      const std::string devices =
          Join(counts, ", ", [](const auto& entry) { return std::to_string(entry.second) + " x " + entry.first; });
      const std::string jobs = Join(status.jobs(), "; ", [](const v1::JobStatus& job) {
        const std::string held = Join(job.devices(), ", ");
        return job.job_id() + " (" + std::to_string(job.ranks_size()) + (job.ranks_size() == 1 ? " rank" : " ranks") +
               " on " + (held.empty() ? "-" : held) + ", step " + std::to_string(job.step()) + ")";
      });
      std::string state = "up";
      std::string version_reason;
      try {
        CheckVersion(client->node(), description);
      } catch (const CommandFailed& other) {
        versions.push_back(other.what());
        version_reason = other.what();
        state = "up, OTHER VERSION";
      }
      nodes.push_back(NodeStatusJson(*client, version_reason.empty() ? "up" : "other version", &description, &status,
                                     version_reason));
      table.AddRow(
          {client->node(), client->address(), state, devices.empty() ? "none" : devices, jobs.empty() ? "-" : jobs});
    } catch (const AgentError& error) {
      reasons.push_back(error.what());
      table.AddRow({client->node(), client->address(), "DOWN", "-", "-"});
      nodes.push_back(NodeStatusJson(*client, "down", nullptr, nullptr, error.what()));
    }
  }
  if (options.json) {
    std::cout << nlohmann::ordered_json{{"nodes", nodes}}.dump(2) << "\n";
  } else {
    std::cout << table.Render();
    for (const std::string& reason : reasons) std::cout << reason << "\n";
    for (const std::string& version : versions) std::cout << version << "\n";
  }
  if (!reasons.empty()) {
    throw CommandFailed(std::to_string(reasons.size()) + " of " + std::to_string(agents.clients.size()) +
                        " agents did not answer (why: " + (options.json ? "each node's reason" : "above") + ")");
  }
  if (!versions.empty()) {
    throw CommandFailed(
        std::to_string(versions.size()) + " of " + std::to_string(agents.clients.size()) +
        " nodes run another version of poplar (why: " + (options.json ? "each node's reason" : "above") + ")");
  }
}

}  // namespace

void RegisterProfileCommand(CLI::App& app) {
  auto options = std::make_shared<ProfileOptions>();
  CLI::App* command = app.add_subcommand("profile", "Measure every device type of a cluster through its agents");
  command->add_option("cluster", options->cluster_file, "Cluster file (YAML, see docs/formats.md)")
      ->required()
      ->check(CLI::ExistingFile);
  command
      ->add_option("-o,--output", options->output,
                   "Folder for the profile files (default: the cluster file's 'profiles', else ./profiles)")
      ->check(NotEmpty());
  command->add_option("--repeats", options->request.repeats, "Timed runs per micro-batch size (0: worker default)")
      ->check(WholeNumberIn(0, 100));
  command
      ->add_option("--largest-micro-batch", options->request.largest_micro_batch,
                   "Stop growing micro-batches here (0: worker default)")
      ->check(WholeNumberIn(0, 1 << 20));
  command->add_option("--type", options->request.types,
                      "Profile only this device type (repeatable; default: every type of the cluster)");
  command->add_flag("--json", options->json,
                    "Print the profiles' summary as one JSON document on stdout (progress stays on stderr)");
  command->callback([options] { RunProfile(*options); });
}

void RegisterStatusCommand(CLI::App& app) {
  auto options = std::make_shared<StatusOptions>();
  CLI::App* command = app.add_subcommand("status", "Show the cluster's agents, their devices and running jobs");
  command->add_option("cluster", options->cluster_file, "Cluster file (YAML, see docs/formats.md)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_flag("--json", options->json,
                    "Print one JSON document on stdout: every node, its state, devices and running jobs");
  command->callback([options] { RunStatus(*options); });
}

}  // namespace poplar
