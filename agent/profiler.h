// Profiling one model on one of this node's device types (docs/worker.md) with a cache: a
// stage measured before for the same model, device, settings and worker (its `--version`
// and its file) is read from <cache_dir>/profiles/ instead of being measured again. The
// stages not in the cache are measured by one `poplar-worker profile` run, which
// interleaves them so that they are timed under the same conditions.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/devices.h"
#include "planner/base/spawner.h"

namespace poplar {

// Mirrors poplar.v1.ProfileRequest.
struct ProfileSettings {
  std::string model_config_json;
  std::string device_type;
  std::vector<int> stages;  // empty: 0..3
  std::string precision = "fp32";
  int repeats = 0;              // 0: the worker's default
  int largest_micro_batch = 0;  // 0: the worker's default
};

// Called with each progress line and whether the stage came from the cache; returns
// false to cancel (the running worker is stopped).
using ProgressFn = std::function<bool(const std::string& line, bool cached)>;
// Called once, only when some stage must be measured: returns the device of the type to
// measure on, which the caller holds until Run returns (or throws DeviceUnavailable).
using ClaimDeviceFn = std::function<DeviceInfo()>;

class Profiler {
 public:
  Profiler(const AgentConfig& config, std::string worker_version, Spawner& spawner);

  // The merged profile file (JSON text) of every requested stage. `device` is any device
  // of the type (it keys the cache); the stages not cached are measured on the one
  // `claim` returns (default: `device`), so a profile read from the cache needs no free
  // device. Throws InputError for a bad request, DeviceUnavailable, or
  // std::runtime_error when a worker fails or the caller cancels.
  std::string Run(const ProfileSettings& settings, const DeviceInfo& device, const ProgressFn& progress,
                  const ClaimDeviceFn& claim = {});

 private:
  std::filesystem::path CacheFolder() const;  // <cache_dir>/profiles
  // The cache file of one stage's profile (docs/formats.md, "Profile cache").
  std::filesystem::path CachePath(const ProfileSettings& settings, const DeviceInfo& device, int stage) const;
  // Runs the worker for `stages`; returns its profile file's text.
  std::string MeasureStages(const ProfileSettings& settings, const DeviceInfo& device, const std::vector<int>& stages,
                            const ProgressFn& progress);

  const AgentConfig& config_;
  const std::string worker_version_;
  Spawner& spawner_;
};

// Removes from the profile cache `folder` the temporaries of agents no longer running
// (a SIGKILL during a measurement left them; `kill(pid, 0)` says ESRCH). A Profiler does
// this for its cache when it is made, at the agent's start.
void RemoveTemporariesOfStoppedAgents(const std::filesystem::path& folder);

// 64-bit FNV-1a as 16 hex digits: the cache key of a text.
std::string StableHash(const std::string& text);

}  // namespace poplar
