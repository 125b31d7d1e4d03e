// poplar-planner-bench: how long planning takes as clusters grow, and how much faster
// poplar's schedules are predicted to train than the baselines on the example clusters.
//
//   poplar-planner-bench CLUSTER.yaml... --json OUT.json
//
// Part 1 plans synthetic clusters from 8 to 100,000 GPUs of 2 to 32 device types
// (all four stages: BuildStageProblem + search + simulation, as `poplar plan` does,
// without reading or writing files) and reports the median wall time of repeated runs.
// Part 2 plans each cluster file given (each must name its `profiles`) with every policy
// and reports predicted samples per second and poplar's speed-up over each baseline.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/base/text_table.h"
#include "planner/cluster/cluster_profiles.h"
#include "planner/model/memory_model.h"
#include "planner/search/plan_file.h"
#include "planner/search/planner.h"

namespace poplar {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr std::int64_t kParams = 354'823'168;  // GPT-2 medium
constexpr std::int64_t kActivationBytes = 1LL << 30;
constexpr std::int64_t kRuntimeBytes = 2LL << 30;

// A device type with its own speed, per-micro-batch overhead and memory (cap 4..64).
DeviceProfile SyntheticProfile(const std::string& type, std::mt19937& rng) {
  std::uniform_real_distribution<double> speed(0.5, 4.0), overhead(0.002, 0.02);
  const int cap = std::uniform_int_distribution<int>(4, 64)(rng);
  const double seconds_per_sample = 0.05 / speed(rng);
  const double fixed = overhead(rng);
  DeviceProfile profile;
  profile.file = type + ".json";
  profile.device_type = type;
  profile.model = {"gpt2-medium", kParams, Precision::kMixed, {}};
  const std::int64_t states = ModelStatesPerRank(kParams, 0, 1, Precision::kMixed).Total();
  profile.memory_bytes = states + kRuntimeBytes + cap * kActivationBytes;
  for (int stage = 0; stage <= 3; ++stage) {
    StageProfile measured;
    measured.stage = stage;
    measured.max_micro_batch = cap;
    measured.optimizer_step_s = 0.01 / speed(rng);
    for (int b = 1; b <= cap; b *= 2) {
      // Utilisation grows with the micro-batch: time = overhead + b * t * (1 + 1/(2b)).
      measured.points.push_back(
          {b, fixed + seconds_per_sample * (b + 0.5), states + kRuntimeBytes + b * kActivationBytes});
    }
    profile.stages.push_back(measured);
  }
  return profile;
}

struct Synthetic {
  ClusterSpec cluster;
  std::map<std::string, DeviceProfile> profiles;
};

// `gpus` devices of `types` types on nodes of 8, global batch `per_gpu` samples per GPU
// (at least 256).
Synthetic SyntheticCluster(int gpus, int types, int per_gpu, std::mt19937& rng) {
  Synthetic synthetic;
  ClusterSpec& cluster = synthetic.cluster;
  cluster.file = "synthetic";
  cluster.name = std::to_string(gpus) + "x" + std::to_string(types);
  cluster.global_batch = std::max<std::int64_t>(256, static_cast<std::int64_t>(per_gpu) * gpus);
  cluster.intra_node = LinkSpec{300e9, 5e-6};
  cluster.inter_node = LinkSpec{25e9, 1e-5};
  std::vector<int> per_type(types, gpus / types);
  for (int t = 0; t < gpus % types; ++t) ++per_type[t];
  int node = 0;
  for (int t = 0; t < types; ++t) {
    const std::string type = "gpu" + std::to_string(t);
    synthetic.profiles.emplace(type, SyntheticProfile(type, rng));
    for (int left = per_type[t]; left > 0; left -= 8) {
      cluster.nodes.push_back({"node" + std::to_string(node++), "", "", {{type, std::min(left, 8)}}});
    }
  }
  return synthetic;
}

double MedianSeconds(const std::function<void()>& run) {
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 || (times.size() < 25 && Clock::now() - start < std::chrono::seconds(2))) {
    const auto before = Clock::now();
    run();
    times.push_back(std::chrono::duration<double>(Clock::now() - before).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Json PlanningTimes() {
  struct Size {
    int gpus, types, per_gpu;
  };
  const std::vector<Size> sizes = {{8, 2, 4},      {64, 2, 4},      {64, 8, 4},      {1024, 2, 4},  {1024, 8, 4},
                                   {1024, 8, 64},  {1024, 32, 4},   {8192, 8, 4},    {8192, 32, 4}, {100000, 2, 4},
                                   {100000, 8, 4}, {100000, 32, 4}, {100000, 32, 32}};
  TextTable table({"GPUs", "types", "global batch", "stage", "rounds", "plan time", "target", "plan file"},
                  {true, true, true, true, true, true, false, true});
  Json rows = Json::array();
  std::mt19937 rng(2026);
  for (const auto& [gpus, types, per_gpu] : sizes) {
    const Synthetic synthetic = SyntheticCluster(gpus, types, per_gpu, rng);
    PlanResult result;
    const double seconds =
        MedianSeconds([&] { result = MakePlan(synthetic.cluster, synthetic.profiles, Policy::kPoplar); });
    std::string target;
    if (gpus == 1024 && types == 8 && per_gpu == 4) target = seconds < 0.05 ? "< 50 ms: met" : "< 50 ms: MISSED";
    if (gpus == 100000 && types == 32 && per_gpu == 4) target = seconds < 1.0 ? "< 1 s: met" : "< 1 s: MISSED";
    // Expanding the schedule to one JSON entry per rank and printing it is linear in
    // the number of GPUs; shown apart from planning.
    const double file_seconds =
        MedianSeconds([&] { (void)PlanToJson(synthetic.cluster, synthetic.profiles, result).dump(); });
    table.AddRow({std::to_string(gpus), std::to_string(types), std::to_string(synthetic.cluster.global_batch),
                  std::to_string(result.chosen_stage), std::to_string(result.Chosen().schedule.Rounds()),
                  Seconds(seconds), target, Seconds(file_seconds)});
    rows.push_back({{"gpus", gpus},
                    {"types", types},
                    {"global_batch", synthetic.cluster.global_batch},
                    {"chosen_stage", result.chosen_stage},
                    {"plan_seconds", seconds},
                    {"plan_file_seconds", file_seconds}});
  }
  std::cout << "Planning time (all four stages, median of repeated runs); plan file: building\n"
               "and printing the per-rank JSON\n\n"
            << table.Render() << "\n";
  return rows;
}

// A cluster file and the stored profiles it names.
struct ExampleCluster {
  ClusterSpec spec;
  std::map<std::string, DeviceProfile> profiles;
};

// The cluster files and their profiles, read before anything is timed so that a wrong
// one fails at once.
std::vector<ExampleCluster> LoadClustersWithProfiles(const std::vector<std::string>& files) {
  std::vector<ExampleCluster> clusters;
  for (const auto& file : files) {
    ExampleCluster cluster{LoadClusterFile(file), {}};
    if (cluster.spec.profiles_dir.empty()) {
      throw InputError(file, "profiles", "is required here: the benchmark plans from stored profiles");
    }
    cluster.profiles = LoadClusterProfiles(cluster.spec, cluster.spec.profiles_dir);
    clusters.push_back(std::move(cluster));
  }
  return clusters;
}

Json PolicyComparison(const std::vector<ExampleCluster>& clusters) {
  TextTable table(
      {"cluster", "poplar", "stage", "uniform", "stage", "proportional", "stage", "vs uniform", "vs proportional"},
      {false, true, true, true, true, true, true, true, true});
  Json rows = Json::array();
  for (const auto& [cluster, profiles] : clusters) {
    Json row = {{"cluster", cluster.name}, {"global_batch", cluster.global_batch}};
    std::vector<std::string> cells = {cluster.name};
    std::map<Policy, double> throughput;
    for (Policy policy : {Policy::kPoplar, Policy::kUniform, Policy::kProportional}) {
      const PlanResult result = MakePlan(cluster, profiles, policy);
      throughput[policy] = result.Chosen().prediction.samples_per_s;
      row[PolicyName(policy)] = {{"stage", result.chosen_stage},
                                 {"samples_per_s", throughput[policy]},
                                 {"step_s", result.Chosen().prediction.step_s}};
      cells.push_back(Fixed(throughput[policy], 1));
      cells.push_back(std::to_string(result.chosen_stage));
    }
    const double vs_uniform = throughput[Policy::kPoplar] / throughput[Policy::kUniform];
    const double vs_proportional = throughput[Policy::kPoplar] / throughput[Policy::kProportional];
    cells.push_back(Fixed(vs_uniform, 2) + "x");
    cells.push_back(Fixed(vs_proportional, 2) + "x");
    row["speedup_vs_uniform"] = vs_uniform;
    row["speedup_vs_proportional"] = vs_proportional;
    table.AddRow(cells);
    rows.push_back(row);
  }
  std::cout << "Predicted samples/s on the example clusters (each policy at its best stage;\n"
               "profiles are derived estimates, see configs/profiles)\n\n"
            << table.Render();
  return rows;
}

}  // namespace
}  // namespace poplar

int main(int argc, char** argv) {
  CLI::App app{"Planner benchmark: planning time and predicted throughput against baselines"};
  std::vector<std::string> clusters;
  std::string json_path;
  app.add_option("clusters", clusters, "Cluster files with stored profiles (`profiles:`) to compare policies on")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--json", json_path, "Write the results as JSON here");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::ordered_json out;
    const auto specs = poplar::LoadClustersWithProfiles(clusters);
    out["planning_time"] = poplar::PlanningTimes();
    out["policies"] = poplar::PolicyComparison(specs);
    if (!json_path.empty()) poplar::WriteFileAtomically(json_path, out.dump(2) + "\n");
  } catch (const std::exception& error) {
    std::cerr << "poplar-planner-bench: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
