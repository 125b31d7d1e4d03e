// How long a stopped rank may take to end before its agent SIGKILLs it: the cluster
// file's job.stop_grace_s, carried to the agents in LaunchRequest.settings. A rank
// ends at once on SIGTERM, except rank 0 with a checkpoint in flight, which finishes
// writing it first (launcher/worker/stop_signals.h).
#pragma once

namespace poplar {

inline constexpr int kDefaultStopGraceSeconds = 30;
inline constexpr int kMostStopGraceSeconds = 3600;

}  // namespace poplar
