// `poplar-agent --config AGENT.yaml`: serves the Agent API (proto/poplar/v1) on the
// address its config names, over TLS with the cluster's credentials, until SIGTERM or
// SIGINT; then it stops every job it runs and exits. Its workers die with it even if it
// is killed (planner/base/spawner.h).
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/agent_config.h"
#include "agent/agent_service.h"
#include "agent/devices.h"
#include "agent/metrics_server.h"
#include "agent/rpc/grpc_log.h"
#include "agent/rpc/keepalive.h"
#include "agent/rpc/tls.h"
#include "agent/work_dir.h"
#include "planner/base/free_port.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

// Says at start why a GPU node will not run GPU work: no GPU found (and why), or a
// worker built without CUDA next to GPUs.
void ReportGpuReadiness(const AgentConfig& config, bool has_gpu, const std::string& why_no_gpu,
                        const std::string& worker_version) {
  if (!config.discover_gpus) return;
  if (!has_gpu) {
    std::fprintf(stderr, "poplar-agent: no GPU: %s\n", why_no_gpu.c_str());
  } else if (worker_version.find("CUDA") == std::string::npos) {
    std::fprintf(stderr,
                 "poplar-agent: warning: this node has GPUs but its poplar-worker has no CUDA (%s); "
                 "GPU profiles and jobs will fail: build the worker for CUDA "
                 "(docs/operations.md, \"Building the worker for CUDA\")\n",
                 worker_version.c_str());
  }
}

std::string WorkerNextToAgent() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "poplar-worker";
  // Installed side by side, or the build tree's launcher/ next to agent/.
  for (const auto& candidate :
       {self.parent_path() / "poplar-worker", self.parent_path().parent_path() / "launcher" / "poplar-worker"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return (self.parent_path() / "poplar-worker").string();
}

using Clock = std::chrono::steady_clock;

// Reads `fd` to its end, keeping the first `keep` bytes in `text`; false if `deadline`
// came first.
bool ReadToEndBy(int fd, Clock::time_point deadline, std::size_t keep, std::string& text) {
  char buffer[256];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd readable{fd, POLLIN, 0};
    if (left <= 0 || poll(&readable, 1, static_cast<int>(left)) == 0) return false;
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got > 0) text.append(buffer, std::min<std::size_t>(got, keep - std::min(keep, text.size())));
    if (got == 0 || (got < 0 && errno != EINTR)) return true;
  }
}

// Waits for child `pid` to end (its wait status in `status`); false if `deadline` came first.
bool WaitBy(pid_t pid, Clock::time_point deadline, int& status) {
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// `poplar-worker --version` of the agent file's worker, which keys the profile cache.
// Within 30 s: a worker that does not answer, or does not end (or leaves a child holding
// its output), must not keep the agent from starting, deaf to SIGTERM, which it blocks
// by then.
std::string WorkerVersion(Spawner& spawner, const AgentConfig& config) {
  constexpr int kTimeoutSeconds = 30;
  const std::string& worker = config.worker;
  const Spawned spawned = spawner.Spawn({worker, {"--version"}, InheritedEnvironment(), "/"});
  const auto deadline = Clock::now() + std::chrono::seconds(kTimeoutSeconds);
  std::string text;
  int status = 0;
  const bool ended = ReadToEndBy(spawned.output_fd, deadline, 4096, text) && WaitBy(spawned.pid, deadline, status);
  close(spawned.output_fd);
  text = Trimmed(text);
  const std::string said = "it said '" + Printable(FirstLine(text)) + "'";
  if (!ended) {
    kill(-spawned.pid, SIGKILL);  // its process group: the worker and what it started
    waitpid(spawned.pid, &status, 0);
    throw InputError(config.file, "worker",
                     worker + " did not answer --version within " + std::to_string(kTimeoutSeconds) + " s (" + said +
                         "); is it poplar-worker?");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.rfind("poplar-worker ", 0) != 0) {
    throw InputError(
        config.file, "worker",
        worker + " does not answer --version like poplar-worker (" + said + " and " + DescribeWaitStatus(status) + ")");
  }
  return text;
}

struct AgentOptions {
  std::string config;
  std::string port_file;
  bool list_gpus = false;
  bool free_port = false;
  std::string nvml_library = "libnvidia-ml.so.1";
};

// --list-gpus: this node's NVIDIA GPUs as one JSON line, {"node", "gpus": [{type, index,
// uuid, memory_bytes}], "why_none"}: what `poplar launch --slurm` asks each node of its
// allocation (launcher/head/slurm_allocation.h). Inside a Slurm job that holds GPUs
// (SLURM_STEP_GPUS, else SLURM_JOB_GPUS), only those. The node is Slurm's name for it
// (SLURMD_NODENAME) inside a job step, else the host name.
void ListGpus(const AgentOptions& options) {
  std::string why_none;
  std::vector<DeviceInfo> found = DiscoverNvidiaGpus(options.nvml_library, &why_none);
  for (const char* variable : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    const char* ids = std::getenv(variable);
    if (ids == nullptr || *ids == '\0') continue;
    const std::size_t on_node = found.size();
    found = GpusOfSlurmJob(found, ids, variable);
    if (found.empty() && on_node > 0) {
      why_none = "the Slurm job holds none of the node's " + std::to_string(on_node) + " GPUs (" + variable + "=" +
                 std::string(ids).substr(0, 200) + ")";
    }
    break;
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const DeviceInfo& gpu : found) {
    nlohmann::json listed = {{"type", gpu.type}, {"index", gpu.index}, {"memory_bytes", gpu.memory_bytes}};
    if (!gpu.uuid.empty()) listed["uuid"] = gpu.uuid;
    gpus.push_back(listed);
  }
  std::string node;
  if (const char* slurm_name = std::getenv("SLURMD_NODENAME")) node = slurm_name;
  if (node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    node = host;
  }
  nlohmann::json line = {{"node", node}, {"gpus", gpus}};
  if (gpus.empty()) line["why_none"] = why_none.empty() ? "NVML lists no GPU" : why_none;
  std::printf("%s\n", line.dump().c_str());
}

void Serve(const AgentOptions& options) {
  // SIGINT, SIGTERM and SIGHUP are taken by a waiting thread; block them in every thread
  // first, before any other thread exists: gRPC's threads (the credentials check below
  // starts some) would otherwise take SIGTERM and die of it, without stopping the jobs.
  // SIGHUP (the terminal of an agent started by hand closing) stops the jobs in order too,
  // rather than killing the agent and its workers, a checkpoint cut short.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const AgentConfig config = LoadAgentConfig(options.config, WorkerNextToAgent());
  const WorkDirLock work_dir_lock(config.work_dir, config.file);
  if (!options.port_file.empty()) {
    const CredentialPaths& files = config.credentials;
    RequireOutputApart(options.port_file,
                       {{config.file, "the agent file (--config)"},
                        {files.ca, "the credentials' ca"},
                        {files.cert, "the credentials' cert"},
                        {files.key, "the credentials' key"},
                        {files.token, "the credentials' token"},
                        {config.worker, "poplar-worker"},
                        // Replacing it would free work_dir for a second agent.
                        {work_dir_lock.path(), "the work_dir's lock file"}},
                       "--port-file");
  }
  auto credentials = AgentServerCredentials(config.credentials, config.file, "poplar-agent");

  std::string worker_version;
  {
    Spawner probe;
    worker_version = WorkerVersion(probe, config);
  }
  AgentService service(config, worker_version);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &port);
  // gRPC sets SO_REUSEPORT by default, which lets a second agent bind a port an agent
  // already holds, the kernel sharing the callers between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  AddAgentKeepalive(builder);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server;
  std::string grpc_reason;
  {
    GrpcLogCapture log;
    server = builder.BuildAndStart();
    if (!server || port == 0) grpc_reason = log.Take();
  }
  if (!server || port == 0) {
    // The credentials were checked on a loopback port (AgentServerCredentials).
    throw InputError(config.file, "listen",
                     "cannot listen on " + config.listen + " (in use, or not an address of this machine; gRPC: " +
                         (grpc_reason.empty() ? "no reason given" : grpc_reason) + ")");
  }
  const std::string address = config.listen.substr(0, config.listen.rfind(':')) + ":" + std::to_string(port);
  if (!options.port_file.empty()) WriteFileAtomically(options.port_file, std::to_string(port) + "\n");
  std::string why_no_gpu;
  const std::vector<DeviceInfo> devices = ListDevices(config, &why_no_gpu);
  const std::string device_list = Join(
      devices, ", ", [](const DeviceInfo& device) { return device.type + (device.emulated ? " (emulated)" : ""); });
  const bool has_gpu =
      std::any_of(devices.begin(), devices.end(), [](const DeviceInfo& device) { return !device.emulated; });
  std::fprintf(stderr, "poplar-agent: listening on %s (TLS, client certificate and token required); devices: %s; %s\n",
               address.c_str(), device_list.empty() ? "none" : device_list.c_str(), worker_version.c_str());
  ReportGpuReadiness(config, has_gpu, why_no_gpu, worker_version);
  // Stops before the service goes: its threads ask the service.
  std::optional<MetricsServer> metrics;
  if (!config.metrics_listen.empty()) {
    metrics.emplace(
        config.metrics_listen, [&service] { return service.MetricsText(); }, config.file);
    std::fprintf(stderr, "poplar-agent: Prometheus metrics on http://%s/metrics\n", config.metrics_listen.c_str());
  }

  std::thread stopper([&] {
    int received = 0;
    sigwait(&stop_signals, &received);
    std::fprintf(stderr, "poplar-agent: %s: stopping every job and exiting\n", strsignal(received));
    const auto grace = service.StopAll(std::string("its poplar-agent was stopped (") + strsignal(received) + ")");
    // The Launch streams stay open while the ranks may take to end (a rank 0 finishing
    // a checkpoint), so that each ends with its job's reason rather than cut off.
    server->Shutdown(std::chrono::system_clock::now() +
                     std::max<std::chrono::milliseconds>(std::chrono::seconds(10), grace + std::chrono::seconds(5)));
  });
  server->Wait();
  stopper.join();
}

}  // namespace
}  // namespace poplar

int main(int argc, char** argv) {
  CLI::App app{"poplar-agent: runs poplar workers on this node for the cluster's head node", "poplar-agent"};
  app.set_version_flag("--version", "poplar-agent " POPLAR_VERSION);
  app.footer("Configuration: docs/operations.md. Credentials: scripts/make-cluster-credentials.");
  poplar::AgentOptions options;
  // Required, but checked in the callback: CLI11 checks requirements before it names an
  // unknown flag, so `poplar-agent --bogus` would only hear that --config is required.
  app.add_option("--config", options.config, "Agent file (YAML; required)")->check(CLI::ExistingFile);
  app.add_option("--port-file", options.port_file, "Write the port it listens on here (for listen: host:0)")
      ->check(poplar::NotEmpty());
  app.add_flag("--free-port", options.free_port,
               "Print a TCP port free on this node and exit (what `poplar launch --slurm` asks rank 0's node "
               "for the rendezvous)");
  auto* list = app.add_flag("--list-gpus", options.list_gpus,
                            "Print this node's NVIDIA GPUs (NVML) as one JSON line and exit (what `poplar launch "
                            "--slurm` asks each node of its allocation)");
  app.add_option("--nvml-library", options.nvml_library, "With --list-gpus: the NVML library to open")
      ->needs(list)
      ->capture_default_str();
  app.callback([&] {
    if (options.list_gpus) return poplar::ListGpus(options);
    if (options.free_port) return static_cast<void>(std::printf("%d\n", poplar::FindFreePort()));
    if (options.config.empty()) throw CLI::RequiredError("--config");
    poplar::Serve(options);
  });
  return poplar::RunApp(app, argc, argv, "poplar-agent", "poplar-agent", "", /*runtime_errors_fail=*/true);
}
