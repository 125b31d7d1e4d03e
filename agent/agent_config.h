// The agent file: where `poplar-agent` listens, how callers must prove they belong to
// the cluster, where it works, and which devices it offers (docs/formats.md):
//
//   listen: 127.0.0.1:7150          # host:port to bind; the agent binds nowhere else
//   metrics: 127.0.0.1:9150         # optional; Prometheus metrics over HTTP (a bare port: on 127.0.0.1)
//   credentials: {ca: ca.pem, cert: nodes/a.pem, key: nodes/a.key, token: token, crl: crl}
//   work_dir: /var/lib/poplar/work  # jobs/<id>/ and the token files requests name
//   cache_dir: /var/lib/poplar/cache  # optional; default <work_dir>/../cache
//   shared_dir: /mnt/shared/poplar  # optional; a folder every node sees at this path
//   worker: /usr/local/bin/poplar-worker  # optional; default: next to poplar-agent
//   gpus: auto                      # auto (NVML, when present) | none
//   nvml_library: libnvidia-ml.so.1 # optional; the NVML library gpus: auto opens
//   emulated:                       # optional emulated CPU devices (docs/worker.md)
//     - {type: emu-fast, count: 1, threads: 1, slowdown: 1.0, memory_mib: 48}
//     - {type: emu-slow, slowdown: 3.0, memory_mib: 20, later: {step: 30, slowdown: 9.0}}
//
// Relative paths are relative to the agent file's folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cluster/credentials.h"
#include "planner/cluster/emulated_device.h"

namespace poplar {

struct AgentConfig {
  std::string file;
  std::string listen;
  // host:port where GET /metrics answers in Prometheus' text format (agent/prometheus.h);
  // empty: not served.
  std::string metrics_listen;
  CredentialPaths credentials;
  std::string work_dir;   // absolute; made, and canonical, by LoadAgentConfig
  std::string cache_dir;  // the same
  // Optional, the same: a folder every node of the cluster sees at this path (NFS, a
  // parallel file system). Training jobs keep their checkpoints in
  // <shared_dir>/jobs/<job id>/checkpoints instead of their job folder, so that any node
  // can resume a job whose rank 0's node was lost (docs/operations.md, "Elastic").
  std::string shared_dir;
  std::string worker;  // path of poplar-worker
  bool discover_gpus = true;
  // What dlopen is given: a file name the loader looks up, or an absolute path.
  std::string nvml_library = "libnvidia-ml.so.1";
  std::vector<EmulatedDeviceSpec> emulated;
};

// Whether reading an agent file makes its folders (work_dir and cache_dir, which must
// take files) or leaves the file system alone (work_dir and cache_dir absolute, not
// canonical: for checking a file's text alone).
enum class AgentFolders { kMake, kLeave };

// Reads and validates the agent file and makes its folders; throws InputError naming
// the file and key. `default_worker` is used when the file has no `worker` key.
AgentConfig LoadAgentConfig(const std::string& path, const std::string& default_worker);

// The agent file's `text` (read from `path`, which names it in errors), as
// LoadAgentConfig reads it, its folders made or left as `folders` says.
AgentConfig ParseAgentConfig(const std::string& text, const std::string& path, const std::string& default_worker,
                             AgentFolders folders);

}  // namespace poplar
