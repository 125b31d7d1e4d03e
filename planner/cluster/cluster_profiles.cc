#include "planner/cluster/cluster_profiles.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/spelling.h"
#include "planner/base/text_file.h"
#include "planner/formats/model_config.h"

namespace poplar {

void RequireProfilesFolder(const std::string& dir, const std::string& source, const std::string& key) {
  std::error_code error;
  if (std::filesystem::is_directory(dir, error)) return;
  const bool file = std::filesystem::exists(dir, error);
  throw InputError(source, key,
                   (file ? dir + " is a file, not a folder of profiles" : "folder " + dir + " does not exist") +
                       " (poplar profile writes one)");
}

namespace {

// Where the cluster file first names `type`: "nodes[1].devices[0].type".
std::string KeyOfType(const ClusterSpec& cluster, const std::string& type) {
  for (std::size_t n = 0; n < cluster.nodes.size(); ++n) {
    const auto& devices = cluster.nodes[n].devices;
    for (std::size_t d = 0; d < devices.size(); ++d) {
      if (devices[d].type == type) {
        return "nodes[" + std::to_string(n) + "].devices[" + std::to_string(d) + "].type";
      }
    }
  }
  return "nodes";
}

// The device types `dir` has profiles of (its *.json files), in name order.
std::vector<std::string> ProfiledTypes(const std::string& dir) {
  std::vector<std::string> types;
  for (const auto& entry : FolderEntries(dir)) {
    if (entry.extension() == ".json") types.push_back(entry.stem().string());
  }
  std::sort(types.begin(), types.end());
  return types;
}

// "; did you mean A100-40GB?" or what the folder has instead, for a type with no profile.
std::string MissingProfileHint(const std::string& type, const std::string& dir) {
  const std::vector<std::string> types = ProfiledTypes(dir);
  if (types.empty()) return "; the folder has no profile (poplar profile writes them)";
  const std::string near = DidYouMean(type, types);
  if (!near.empty()) return near;
  constexpr std::size_t kMostListed = 8;
  const std::vector<std::string> listed(types.begin(), types.begin() + std::min(types.size(), kMostListed));
  return "; the folder has profiles of " + Join(listed, ", ") + (types.size() > kMostListed ? ", ..." : "");
}

}  // namespace

std::map<std::string, DeviceProfile> LoadClusterProfiles(const ClusterSpec& cluster, const std::string& dir) {
  std::map<std::string, DeviceProfile> profiles;
  const DeviceProfile* first = nullptr;
  const DeviceProfile* with_config = nullptr;  // the first that records its model.config
  for (const auto& type : cluster.DeviceTypes()) {
    const std::string path = (std::filesystem::path(dir) / (type + ".json")).string();
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      throw InputError(
          cluster.file, KeyOfType(cluster, type),
          "device type '" + type + "' has no profile (looked for " + path + ")" + MissingProfileHint(type, dir));
    }
    RequireRegularFile(path);  // a profile poplar wrote is a file; a pipe or device here is a mistake
    DeviceProfile profile = LoadProfileFile(path);
    if (profile.device_type != type) {
      throw InputError(path, "device_type", "is '" + profile.device_type + "' but the file is for '" + type + "'");
    }
    if (profile.model.precision != cluster.precision) {
      throw InputError(path, "model.precision",
                       "is " + PrecisionName(profile.model.precision) + " but " + cluster.file + " trains in " +
                           PrecisionName(cluster.precision));
    }
    auto& stored = profiles.emplace(type, std::move(profile)).first->second;
    if (first && stored.model.params != first->model.params) {
      throw InputError(path, "model.params",
                       "is " + std::to_string(stored.model.params) + " but " + first->file + " profiled a model of " +
                           std::to_string(first->model.params) +
                           " parameters; profile every device with the same model");
    }
    // Profiles of one parameter count may still be of models of other shapes.
    if (stored.model.config && with_config && *stored.model.config != *with_config->model.config) {
      throw InputError(path, "model.config",
                       "is " + ModelConfigJson(*stored.model.config) + " but " + with_config->file + " profiled " +
                           ModelConfigJson(*with_config->model.config) + "; profile every device with the same model");
    }
    if (!first) first = &stored;
    if (!with_config && stored.model.config) with_config = &stored;
  }
  // The memory model sizes every stage from the profiles' parameter count: profiles of
  // another model would plan micro-batches that do not fit, or leave memory unused.
  // A profile that records its model's configuration (poplar-worker profile does) must
  // have measured that very model.
  if (first && cluster.job) {
    const ModelConfig job_model = LoadJobModel(cluster).config;
    for (const auto& [type, profile] : profiles) {
      RequireJobModel(cluster, job_model, profile.file, profile.model.params, profile.model.config,
                      "profile the devices with that model (poplar profile)");
    }
  }
  return profiles;
}

std::string ProfilesOfPlan(const ClusterSpec& cluster, const std::string& plan_file) {
  if (!cluster.profiles_dir.empty()) {
    RequireProfilesFolder(cluster.profiles_dir, cluster.file, "profiles");
    return cluster.profiles_dir;
  }
  const std::string beside = (std::filesystem::path(ParentFolder(plan_file)) / "profiles").string();
  std::error_code error;
  return std::filesystem::is_directory(beside, error) ? beside : "";
}

}  // namespace poplar
