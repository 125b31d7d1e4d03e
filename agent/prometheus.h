// An agent's state in Prometheus' text exposition format (version 0.0.4), for the
// scrape its agent file's `metrics` address serves (agent/metrics_server.h;
// docs/operations.md, "Prometheus"). Pure: the service hands it a snapshot.
//
// Gauges, every sample labelled `node` with the machine's host name (what the agent's
// Describe reports):
//   poplar_device_busy{device, type}             1 while a job or a profile holds it
//   poplar_device_memory_bytes{device, type}     the memory it offers
//   poplar_device_job{device, type, job}         1 for the job that holds it
//   poplar_rank_step{job, rank}                  a running job's local ranks: the last step reported,
//   poplar_rank_step_seconds, poplar_rank_samples_per_second, poplar_rank_loss,
//   poplar_rank_compute_seconds, poplar_rank_communication_seconds,
//   poplar_rank_idle_seconds (step less compute and optimizer), of that step
// Label values are escaped as the format asks (backslash, double quote, newline).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace poplar {

struct DeviceState {
  std::string device;  // "<type> <index>" (DeviceKey)
  std::string type;
  std::int64_t memory_bytes = 0;
  bool busy = false;
  std::string job;  // the job holding it, if a job does
};

// A local rank's latest metrics record (docs/worker.md, "Metrics").
struct RankState {
  std::string job;
  int rank = 0;
  nlohmann::json record;
};

std::string PrometheusText(const std::string& node, const std::vector<DeviceState>& devices,
                           const std::vector<RankState>& ranks);

}  // namespace poplar
