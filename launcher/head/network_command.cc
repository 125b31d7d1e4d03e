// `poplar network`: times the collectives among every device of the cluster through the
// agents (poplar-worker network on each rank, with the backend and payload type training
// will use), fits a line per collective and writes the network file that the cluster
// file's `network.measured` names (docs/cost-model.md, "Measured network").
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>

#include "launcher/head/agent_job.h"
#include "launcher/head/head_agents.h"
#include "launcher/head/head_commands.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/formats/network.h"
#include "planner/formats/precision.h"
#include "planner/search/plan_file.h"

namespace poplar {
namespace {

struct NetworkOptions {
  std::string cluster_file;
  std::string output;   // default: the cluster file's network.measured, else network.json
  double max_mib = 0;   // 0: the worker's default
  int master_port = 0;  // 0: a port rank 0's agent finds free
  int timeout_s = 0;
  bool json = false;
};

// A plan file that only places the ranks: one per device, in rank order (as `poplar
// plan` numbers them), each with one sample so that it is a valid plan.
// A fitted line as the declared link that the cost model would turn into it
// (CollectiveTimes::OverLink): bandwidth per direction and latency per hop, to compare
// with the cluster file's `network` section.
std::string AsDeclaredLink(const CollectiveLine& line, Collective collective, int ranks) {
  const CollectiveLine unit = CollectiveTimes::OverLink(LinkSpec{1.0, 1.0}, ranks).Of(collective);
  const double bytes_per_s = line.payload_bytes_per_s / unit.payload_bytes_per_s;
  return Fixed(bytes_per_s * 8 / 1e9, 2) + " Gb/s, " + Seconds(line.fixed_s / unit.fixed_s) + "/hop";
}

void PrintReport(const ClusterSpec& cluster, const MeasuredNetwork& network, const std::string& output) {
  TextTable table({"collective", "fixed", "payload rate", "as a declared link", "worst fit error"},
                  {false, true, true, true, true});
  for (Collective collective : kCollectives) {
    const CollectiveLine& line = network.times.Of(collective);
    table.AddRow({CollectiveName(collective), Seconds(line.fixed_s),
                  Fixed(line.payload_bytes_per_s * 8 / 1e9, 2) + " Gb/s",
                  AsDeclaredLink(line, collective, network.world_size()),
                  Fixed(100 * network.WorstRelativeError(collective), 1) + "%"});
  }
  std::cout << "network of " << cluster.name << ": " << Count(network.world_size(), "rank") << " on "
            << Count(network.nodes(), "node") << " over " << network.backend << ", "
            << WorkerPrecisionName(network.precision) << " payloads, "
            << network.points.size() / std::size(kCollectives) << " sizes\n"
            << table.Render() << "network written to " << output << "\n";
  const auto absolute = [](const std::string& path) { return std::filesystem::absolute(path).lexically_normal(); };
  if (cluster.measured_network_file.empty() || absolute(cluster.measured_network_file) != absolute(output)) {
    std::cout << "to plan with it, add to " << cluster.file << ":\n  network:\n    measured: "
              << std::filesystem::relative(absolute(output), absolute(ParentFolder(cluster.file))).string() << "\n";
  }
}

void RunNetwork(const NetworkOptions& options) {
  const ClusterSpec cluster = LoadClusterFile(options.cluster_file, ClusterRead::kNetworkElsewhere);
  const std::string output = !options.output.empty()                  ? options.output
                             : !cluster.measured_network_file.empty() ? cluster.measured_network_file
                                                                      : "network.json";
  // The cluster's own network.measured is where a new measurement belongs.
  std::vector<InputFile> inputs = cluster.InputFiles();
  inputs.erase(std::remove_if(inputs.begin(), inputs.end(),
                              [&](const InputFile& input) { return input.path == cluster.measured_network_file; }),
               inputs.end());
  RequireOutputApart(output, inputs, "--output");
  const int world_size = cluster.DeviceCount();
  if (world_size < 2) {
    throw InputError(options.cluster_file, "nodes", "has one device: there is no network to measure");
  }
  ClusterAgents agents = ConnectAgents(cluster);
  const std::string job_id = DefaultJobId(cluster.name, "network");
  const std::vector<RankSlot> slots = cluster.Ranks();
  const std::string plan = PlacementPlanJson(slots).dump(2) + "\n";
  const std::string precision = WorkerPrecisionName(cluster.precision);
  const int master_port = RendezvousPort(agents, slots.front().node, options.master_port);
  std::vector<std::pair<std::size_t, v1::LaunchRequest>> requests;
  for (std::size_t node = 0; node < cluster.nodes.size(); ++node) {
    v1::LaunchRequest request;
    request.set_kind(v1::LaunchRequest::NETWORK);
    request.set_job_id(job_id);
    request.set_node(cluster.nodes[node].name);
    request.set_plan_json(plan);
    request.set_master_addr(cluster.nodes.front().host);
    request.set_master_port(master_port);
    request.set_precision(precision);
    request.set_timeout_s(options.timeout_s);
    request.set_network_max_bytes(static_cast<std::int64_t>(options.max_mib * (1 << 20)));
    requests.emplace_back(node, std::move(request));
  }
  CheckAgentJob(cluster, agents, job_id, requests);
  if (!options.json) {
    std::cerr << "measuring the collectives among " << Count(world_size, "rank") << " on "
              << Count(static_cast<std::int64_t>(cluster.nodes.size()), "node") << ", " << precision
              << " payloads (job " << job_id << ")" << std::endl;
  }

  std::vector<RankInfo> rank_infos;
  std::vector<NetworkRank> measured_ranks;
  for (const RankSlot& slot : slots) {
    rank_infos.push_back({slot.node, slot.device_type});
    measured_ranks.push_back({slot.node, slot.device_type});
  }
  LaunchMonitor monitor("", rank_infos, 0, 0, std::cerr);
  std::vector<CollectivePoint> points;
  std::string backend;
  std::string bad_line;
  const AgentJobOutcome outcome =
      RunAgentJob(cluster, agents, job_id, requests, monitor, std::cerr, [&](int rank, const std::string& text) {
        if (rank != 0) return;
        try {
          const MeasurementLine line = ParseMeasurementLine(text, "rank 0's measurement");
          if (line.world_size != world_size) {
            throw InputError(
                "rank 0's measurement", "world_size",
                std::to_string(line.world_size) + " ranks measured, " + std::to_string(world_size) + " expected");
          }
          points.push_back(line.point);
          backend = line.backend;
        } catch (const InputError& error) {
          if (bad_line.empty()) bad_line = error.what();
        }
      });
  if (monitor.failed()) {
    throw CommandFailed("measuring the network failed: " + monitor.RootCause() + "; nothing was written",
                        outcome.signal != 0 ? 128 + outcome.signal : 1);
  }
  if (!bad_line.empty()) throw CommandFailed("measuring the network failed: " + bad_line + "; nothing was written");
  MeasuredNetwork network;
  try {
    network = FitNetwork(points, measured_ranks, backend, cluster.precision, output);
  } catch (const InputError& error) {  // too few points: the worker stopped short
    throw CommandFailed("measuring the network failed: rank 0 reported " + std::to_string(points.size()) +
                        " measurements, and " + error.reason() + "; nothing was written");
  }
  const nlohmann::ordered_json document = NetworkToJson(network);
  WriteFileAtomically(output, document.dump(2) + "\n");
  if (options.json) {
    std::cout << document.dump(2) << "\n";
    return;
  }
  PrintReport(cluster, network, output);
}

}  // namespace

void RegisterNetworkCommand(CLI::App& app) {
  auto options = std::make_shared<NetworkOptions>();
  CLI::App* command = app.add_subcommand(
      "network", "Measure the collectives among every device of the cluster; write the network file");
  command->add_option("cluster", options->cluster_file, "Cluster file (YAML, with 'credentials')")
      ->required()
      ->check(CLI::ExistingFile);
  command
      ->add_option("-o,--output", options->output,
                   "Network file to write (default: the cluster file's network.measured, else network.json)")
      ->check(NotEmpty());
  command
      ->add_option("--max-mib", options->max_mib,
                   "Largest payload in MiB (default 64; emulated devices: an eighth of their memory)")
      ->check(NumberWhere([](double v) { return v >= 0.0078125 && v <= 1048576; },
                          "a number of MiB from 1/128 to 1048576"));
  AddRendezvousOptions(command, options->master_port, options->timeout_s);
  command->add_flag("--json", options->json, "Print the network file on stdout and nothing else there");
  command->callback([options] { RunNetwork(*options); });
}

}  // namespace poplar
