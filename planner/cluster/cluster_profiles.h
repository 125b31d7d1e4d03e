// The profiles of a cluster's device types, read from a folder and checked against the
// cluster and each other.
#pragma once

#include <map>
#include <string>

#include "planner/cluster/cluster.h"
#include "planner/formats/profile.h"

namespace poplar {

// The profile of every device type of `cluster`, read from `dir`/<type>.json, checked
// against each other (same model, same precision as the cluster) and, when the cluster
// has a job, against its job.model's parameter count. Throws InputError naming the
// cluster file when a type has no profile.
std::map<std::string, DeviceProfile> LoadClusterProfiles(const ClusterSpec& cluster, const std::string& dir);

// The profiles a plan file was made from, where they are known: the cluster file's
// `profiles`, else a profiles/ folder beside the plan (where `poplar plan` and `poplar
// launch` keep those the agents measured). Empty when neither is there.
std::string ProfilesOfPlan(const ClusterSpec& cluster, const std::string& plan_file);

// Throws InputError naming `source` and `key` (the cluster file and "profiles", or a
// flag and "") unless `dir` is a folder: missing, or a file given for it.
void RequireProfilesFolder(const std::string& dir, const std::string& source, const std::string& key);

}  // namespace poplar
