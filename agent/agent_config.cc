#include "agent/agent_config.h"

#include <unistd.h>

#include <filesystem>

#include "planner/base/host_port.h"
#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/base/yaml_fields.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

// `key`'s folder (`value`, relative to `base`) as an absolute path; with kMake, made
// and able to take files (/proc or a read-only mount is refused here, naming this file
// and the key, not at the first profile or job), and canonical.
std::string Folder(YamlFields& fields, const std::string& key, const std::string& value, const std::string& base,
                   AgentFolders folders) {
  const fs::path path = fs::absolute(ResolveAgainst(base, value)).lexically_normal();
  if (folders == AgentFolders::kLeave) return path.string();
  try {
    MakeOutputFolder(path.string(), key);
    RequireWritableFolder(path.string(), key);
  } catch (const InputError& refusal) {
    fields.Fail(key, refusal.reason());
  }
  return fs::canonical(path).string();
}

}  // namespace

AgentConfig ParseAgentConfig(const std::string& text, const std::string& path, const std::string& default_worker,
                             AgentFolders folders) {
  const YAML::Node root = ParseYamlDocument(text, path);
  YamlFields fields(root, path, "");
  const std::string base = ParentFolder(path);

  AgentConfig config;
  config.file = path;
  config.listen = fields.String("listen");
  if (const std::string problem = HostPortProblem(config.listen, 0); !problem.empty()) fields.Fail("listen", problem);
  if (const auto metrics = fields.OptionalString("metrics")) {
    // A bare port serves on loopback: what the node's scraper reaches, nobody else.
    config.metrics_listen = metrics->find(':') == std::string::npos ? "127.0.0.1:" + *metrics : *metrics;
    if (const std::string problem = HostPortProblem(config.metrics_listen, 1); !problem.empty()) {
      fields.Fail("metrics", problem);
    }
    if (config.metrics_listen == config.listen) fields.Fail("metrics", "is the agent's listen address too");
  }
  config.credentials = ParseCredentials(fields.Map("credentials"), base);
  config.work_dir = Folder(fields, "work_dir", fields.String("work_dir"), base, folders);
  const std::string cache =
      fields.OptionalString("cache_dir").value_or((fs::path(config.work_dir).parent_path() / "cache").string());
  config.cache_dir = Folder(fields, "cache_dir", cache, base, folders);
  if (const auto shared = fields.OptionalString("shared_dir")) {
    config.shared_dir = Folder(fields, "shared_dir", *shared, base, folders);
  }
  config.worker = ResolveAgainst(base, fields.OptionalString("worker").value_or(default_worker));
  std::error_code error;  // a path too long is no worker either
  if (!fs::is_regular_file(config.worker, error) || access(config.worker.c_str(), X_OK) != 0) {  // a folder passes X_OK
    fields.Fail("worker", "'" + config.worker + "' is not an executable poplar-worker");
  }
  const std::string gpus = fields.OptionalString("gpus").value_or("auto");
  if (gpus != "auto" && gpus != "none") fields.Fail("gpus", "must be auto or none, got '" + gpus + "'");
  config.discover_gpus = gpus == "auto";
  if (auto library = fields.OptionalString("nvml_library")) {
    // A bare file name is the loader's to find (as the driver's own is); a path is the
    // file's, relative to this file.
    config.nvml_library = library->find('/') == std::string::npos ? *library : ResolveAgainst(base, *library);
  }

  config.emulated = ParseEmulatedDevices(fields, "emulated");
  fields.Finish();
  return config;
}

AgentConfig LoadAgentConfig(const std::string& path, const std::string& default_worker) {
  return ParseAgentConfig(ReadTextFile(path), path, default_worker, AgentFolders::kMake);
}

}  // namespace poplar
