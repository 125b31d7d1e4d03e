#include "launcher/worker/network_mode.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "launcher/comm/communicator.h"
#include "launcher/device/device.h"
#include "launcher/worker/metrics_writer.h"
#include "launcher/worker/stopwatch.h"
#include "launcher/zero/flat_layout.h"
#include "launcher/zero/training_engine.h"
#include "planner/base/input_error.h"
#include "planner/base/median.h"
#include "planner/formats/network.h"

namespace poplar {
namespace {

constexpr std::int64_t kSmallestBytes = 4096;

// Payload sizes: `smallest`, x4, up to `largest`, which is always measured.
std::vector<std::int64_t> PayloadSizes(std::int64_t smallest, std::int64_t largest) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t bytes = smallest; bytes < largest; bytes *= 4) sizes.push_back(bytes);
  sizes.push_back(largest);
  return sizes;
}

// The buffers of one payload size: whole (the all-reduce's tensor, the reduce-scatter's
// input, the all-gather's output) and one rank's shard.
struct Buffers {
  torch::Tensor whole;
  torch::Tensor shard;
  Communicator::Chunks chunks;  // every rank's shard size; empty: even
};

void RunOnce(Communicator& communicator, Collective collective, Buffers& buffers) {
  switch (collective) {
    case Collective::kAllReduce:
      communicator.AllReduceSum(buffers.whole);
      break;
    case Collective::kReduceScatter:
      communicator.ReduceScatterSum(buffers.whole, buffers.shard, buffers.chunks);
      break;
    case Collective::kAllGather:
      communicator.AllGather(buffers.shard, buffers.whole, buffers.chunks);
      break;
  }
}

// Every rank's `values`, as a [world size, values] tensor on the CPU (the same on every
// rank).
torch::Tensor GatherOverRanks(Communicator& communicator, const std::vector<double>& values, torch::Device device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  torch::Tensor shard = torch::tensor(values, torch::kFloat64).to(device);
  torch::Tensor all = torch::empty({static_cast<std::int64_t>(values.size()) * communicator.world_size()}, options);
  communicator.AllGather(shard, all);
  return all.view({communicator.world_size(), static_cast<std::int64_t>(values.size())}).cpu();
}

// How long the rank that arrives last waits before it calls: long enough for the others,
// waiting inside the collective, to have gone idle (a CPU thread asleep, a virtual CPU
// halted) as they have in training, where they wait for the slowest rank's compute.
constexpr auto kLateArrival = std::chrono::milliseconds(2);

// `runs` timed runs as training meets a collective: after a barrier, every rank but one
// calls at once and waits; that one, rank `run % world size`, calls kLateArrival later,
// and the run's time is its own, from its call to the collective's end there (what the
// step on the critical path pays). The same on every rank.
std::vector<double> TimeRuns(Communicator& communicator, Collective collective, Buffers& buffers, int runs,
                             torch::Device device) {
  std::vector<double> mine;
  for (int run = 0; run < runs; ++run) {
    communicator.Barrier();
    Synchronize(device);
    const bool late = run % communicator.world_size() == communicator.rank();
    if (late) std::this_thread::sleep_for(kLateArrival);
    const auto start = Clock::now();
    RunOnce(communicator, collective, buffers);
    Synchronize(device);
    mine.push_back(SecondsSince(start));
  }
  const torch::Tensor all = GatherOverRanks(communicator, mine, device);
  const auto by_rank = all.accessor<double, 2>();
  std::vector<double> times;
  for (int run = 0; run < runs; ++run) times.push_back(by_rank[run % communicator.world_size()][run]);
  return times;
}

// The median of the late rank's times over at least `repeats` runs, and over more
// for fast collectives: as many as fill kBudgetSeconds, at most kMostRuns. The count
// comes from one timed run that every rank sees alike, so all ranks run as many.
double TimeCollective(Communicator& communicator, Collective collective, Buffers& buffers, int repeats,
                      torch::Device device) {
  constexpr double kBudgetSeconds = 0.05;
  constexpr int kMostRuns = 50;
  for (int warm_up = 0; warm_up < 3; ++warm_up) RunOnce(communicator, collective, buffers);  // buffers, kernels
  const double first = TimeRuns(communicator, collective, buffers, 1, device).front();
  const double filling = std::ceil(kBudgetSeconds / std::max(first, 1e-9));
  const int runs = std::max(repeats, static_cast<int>(std::min<double>(kMostRuns, filling)));
  return Median(TimeRuns(communicator, collective, buffers, runs, device));
}

std::int64_t SmallestOverRanks(Communicator& communicator, std::int64_t value, torch::Device device) {
  return static_cast<std::int64_t>(
      GatherOverRanks(communicator, {static_cast<double>(value)}, device).min().item<double>());
}

std::string Size(std::int64_t bytes) {
  char text[32];
  if (bytes >= (1 << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / double(1 << 20));
  } else {
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  }
  return text;
}

// What a rank checks and opens on its own, before it meets the others.
struct NetworkSetup {
  torch::Device device;
  CollectiveBackend backend;
  GlooReduceScatter reduce_scatter;
  torch::ScalarType type;  // of the payloads
  MetricsWriter lines;     // rank 0's --metrics, started
};

NetworkSetup SetUpLocally(const NetworkOptions& options, const DistributedEnv& env) {
  const torch::Device device = SetUpDevice(options.device, env.local_rank);
  const CollectiveBackend backend = ParseCollectiveBackend(options.backend, "--backend");
  Communicator::UsableBackend(device, backend, env.world_size);  // its error, before the rendezvous
  const GlooReduceScatter reduce_scatter = GlooReduceScatterOfEnvironment();
  const torch::ScalarType type = WorkingType(options.precision, "--precision");
  // Opened before the rendezvous, so that a path rank 0 cannot write fails it at once.
  MetricsWriter lines(env.rank == 0 ? options.metrics : "", env.rank);
  lines.Start(/*append=*/false);
  return {device, backend, reduce_scatter, type, std::move(lines)};
}

}  // namespace

void MeasureNetwork(const NetworkOptions& options) {
  const DistributedEnv env = DistributedEnv::FromEnvironment();
  if (env.world_size < 2) {
    throw InputError("WORLD_SIZE", "",
                     "is " + std::to_string(env.world_size) + ": measuring the network needs two or more ranks");
  }
  if (!options.state_shares.empty()) {
    double sum = 0;
    for (const double share : options.state_shares) sum += share;
    if (static_cast<int>(options.state_shares.size()) != env.world_size || sum <= 0) {
      throw InputError("--state-shares", "",
                       "needs one share per rank (" + std::to_string(env.world_size) + ") with a positive sum, got " +
                           std::to_string(options.state_shares.size()) + " adding up to " + std::to_string(sum));
    }
  }
  // A rank that stops before the rendezvous tells the others why, as in training: they
  // waited out --timeout for it.
  NetworkSetup setup =
      Rendezvous::Before(env, std::chrono::seconds(options.timeout_s), [&] { return SetUpLocally(options, env); });
  const torch::Device device = setup.device;
  const torch::ScalarType type = setup.type;
  MetricsWriter& lines = setup.lines;
  Communicator communicator(env, std::chrono::seconds(options.timeout_s), device, setup.backend, setup.reduce_scatter);
  // By flag, so that a difference is named: "'--repeats' is 2 here but 1 on rank 0".
  communicator.RequireAgreement(
      "network settings", nlohmann::json{{"--precision", options.precision},
                                         {"--max-bytes", options.max_bytes},
                                         {"--repeats", options.repeats},
                                         {"--backend", options.backend},
                                         {"--state-shares", options.state_shares},
                                         {"POPLAR_GLOO_REDUCE_SCATTER", GlooReduceScatterName(setup.reduce_scatter)}}
                              .dump());
  // A payload, its shard, the chunks a Gloo reduce-scatter receives and those of the
  // previous run, which Gloo's threads may not have released yet, must fit every rank's
  // emulated memory (an eighth each leaves room): the largest payload is the smallest
  // rank's.
  std::int64_t mine = options.max_bytes;
  if (options.device.memory_bytes > 0) mine = std::min(mine, options.device.memory_bytes / 8);
  const std::int64_t element = torch::elementSize(type);
  const std::int64_t granule = element * env.world_size;  // whole elements in every shard
  const std::int64_t largest = SmallestOverRanks(communicator, mine, device) / granule * granule;
  // Every rank's shard holds at least one element: with many ranks the smallest payload
  // grows (two sizes at least are needed to fit a line).
  const std::int64_t smallest = std::max(kSmallestBytes, granule);
  if (largest < 2 * smallest) {
    throw InputError("--max-bytes", "",
                     "leaves payloads of " + std::to_string(largest) + " bytes; measuring needs at least " +
                         std::to_string(2 * smallest) + " (raise it, or the device memory)");
  }
  if (env.rank == 0) {
    std::cout << "measuring " << communicator.world_size() << " ranks over " << communicator.backend_name() << ", "
              << options.precision << " payloads of " << Size(smallest) << " to " << Size(largest) << std::endl;
  }
  for (const std::int64_t size : PayloadSizes(smallest, largest)) {
    const std::int64_t elements = std::max<std::int64_t>(size / granule, 1) * env.world_size;
    const auto tensor_options = torch::TensorOptions().dtype(type).device(device);
    Communicator::Chunks chunks;
    if (!options.state_shares.empty()) chunks = ShareSlices(elements, options.state_shares, env.world_size);
    const std::int64_t shard = chunks.empty() ? elements / env.world_size : chunks[env.rank];
    Buffers buffers{torch::zeros({elements}, tensor_options), torch::zeros({shard}, tensor_options), chunks};
    const std::int64_t bytes = elements * element;
    for (Collective collective : kCollectives) {
      const double seconds = TimeCollective(communicator, collective, buffers, options.repeats, device);
      lines.Write(MeasurementLineToJson(
          {{collective, static_cast<double>(bytes), seconds}, communicator.world_size(), communicator.backend_name()}));
      if (env.rank == 0) {
        std::cout << CollectiveName(collective) << " " << Size(bytes) << ": " << seconds * 1e6 << " us, "
                  << bytes / seconds / 1e9 << " GB/s payload" << std::endl;
      }
    }
  }
}

}  // namespace poplar
