#include "launcher/head/slurm_allocation.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "planner/base/command_failed.h"
#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/spawner.h"
#include "planner/formats/profile.h"

namespace poplar {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

}  // namespace

std::string FindInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream folders(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string folder; std::getline(folders, folder, ':');) {
    const std::string candidate = (std::filesystem::path(folder.empty() ? "." : folder) / name).string();
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) {
      return std::filesystem::absolute(candidate).string();
    }
  }
  throw CommandFailed("--slurm: " + name + " is not in PATH; is Slurm's client (slurm-client) installed here?");
}

std::string RunToEnd(const std::vector<std::string>& argv) {
  Spawner spawner;
  Spawned child;
  try {
    child = spawner.Spawn({argv.at(0), {argv.begin() + 1, argv.end()}, WholeEnvironment(), ""});
  } catch (const std::runtime_error& error) {
    throw CommandFailed(std::string("--slurm: ") + error.what());
  }
  std::string output;
  char buffer[4096];
  for (ssize_t got; (got = ::read(child.output_fd, buffer, sizeof buffer)) != 0;) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(child.output_fd);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (ExitCodeOf(status) != 0) {
    std::string command;
    for (const std::string& arg : argv) command += (command.empty() ? "" : " ") + arg;
    throw CommandFailed("--slurm: `" + command + "` " + DescribeWaitStatus(status) +
                        (output.empty() ? "" : ":\n" + output));
  }
  return output;
}

std::vector<int> ParseCpusPerNode(const std::string& text, std::size_t nodes) {
  const auto malformed = [&](const std::string& why) {
    return CommandFailed("--slurm: SLURM_JOB_CPUS_PER_NODE '" + text + "' " + why);
  };
  // A count of at most 7 digits: no node has ten million CPUs.
  const auto count = [&](const std::string& digits) {
    if (digits.empty() || digits.size() > 7 || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw malformed("is not a list of CPU counts, each N or N(xK)");
    }
    const int value = std::stoi(digits);
    if (value == 0) throw malformed("gives a node no CPU");
    return value;
  };
  std::vector<int> cpus;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    int repeat = 1;
    if (const auto open = item.find("(x"); open != std::string::npos) {
      if (item.back() != ')') throw malformed("is not a list of CPU counts, each N or N(xK)");
      repeat = count(item.substr(open + 2, item.size() - open - 3));
      item.resize(open);
    }
    const int each = count(item);
    if (static_cast<std::size_t>(repeat) > nodes - std::min(nodes, cpus.size())) {
      throw malformed("names more nodes than the allocation's " + std::to_string(nodes));
    }
    cpus.insert(cpus.end(), repeat, each);
  }
  if (cpus.size() != nodes) {
    throw malformed("names " + std::to_string(cpus.size()) + " nodes, the allocation " + std::to_string(nodes));
  }
  return cpus;
}

int CpusPerRank(const std::map<std::string, int>& cpus, const std::map<std::string, int>& ranks) {
  int share = 0;
  for (const auto& [node, count] : ranks) {
    const auto held = cpus.find(node);
    if (held == cpus.end()) return 0;
    if (held->second < count) {
      throw CommandFailed("--slurm: node '" + node + "' holds " + std::to_string(held->second) +
                          " CPU(s) of this allocation for " + std::to_string(count) +
                          " ranks of the plan: ask Slurm for one CPU per rank at least (salloc or sbatch "
                          "--ntasks-per-node, --cpus-per-task)");
    }
    const int even = held->second / count;
    share = share == 0 ? even : std::min(share, even);
  }
  return share;
}

SlurmAllocation CurrentSlurmAllocation() {
  SlurmAllocation allocation;
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (job == nullptr || nodelist == nullptr || *job == '\0' || *nodelist == '\0') {
    throw CommandFailed(
        "--slurm: not inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST are not set); run it in "
        "`salloc --nodes=N ...` or in an sbatch script (docs/operations.md, \"Running under Slurm\")");
  }
  allocation.job_id = job;
  const std::string scontrol = FindInPath("scontrol");
  allocation.nodes = Lines(RunToEnd({scontrol, "show", "hostnames", nodelist}));
  if (allocation.nodes.empty()) {
    throw CommandFailed("--slurm: SLURM_JOB_NODELIST '" + std::string(nodelist) + "' names no node");
  }
  // One line per node: "NodeName=n1 Arch=... NodeAddr=10.0.0.1 NodeHostName=n1 ...".
  for (const std::string& line : Lines(RunToEnd({scontrol, "--oneliner", "show", "node", nodelist}))) {
    std::string name, address;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word.rfind("NodeName=", 0) == 0) name = word.substr(9);
      if (word.rfind("NodeAddr=", 0) == 0) address = word.substr(9);
    }
    if (!name.empty() && !address.empty()) allocation.addresses[name] = address;
  }
  for (const std::string& node : allocation.nodes) {
    if (allocation.addresses.count(node) == 0) {
      throw CommandFailed("--slurm: `scontrol show node " + node + "` gives no NodeAddr for node '" + node + "'");
    }
  }
  if (const char* cpus = std::getenv("SLURM_JOB_CPUS_PER_NODE"); cpus != nullptr && *cpus != '\0') {
    const std::vector<int> counts = ParseCpusPerNode(cpus, allocation.nodes.size());
    for (std::size_t i = 0; i < counts.size(); ++i) allocation.cpus[allocation.nodes[i]] = counts[i];
  }
  return allocation;
}

NodeGpus ParseNodeGpus(const std::string& line, const std::string& source) {
  const nlohmann::json json = ParseJsonObject(line, source);
  JsonFields fields(json, source, "");
  NodeGpus node;
  node.node = fields.String("node");
  node.why_none = fields.OptionalString("why_none").value_or("");
  const nlohmann::json& gpus = fields.Child("gpus");
  if (!gpus.is_array()) fields.Fail("gpus", "must be a list of {type, index, uuid, memory_bytes}");
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    JsonFields gpu(gpus[i], source, "gpus[" + std::to_string(i) + "]");
    const std::string type = gpu.String("type");
    if (const std::string problem = DeviceTypeProblem(type); !problem.empty()) gpu.Fail("type", problem);
    const int index = static_cast<int>(gpu.IntegerIn("index", 0, 1 << 20, "a GPU index"));
    gpu.IntegerIn("memory_bytes", 0, std::int64_t{1} << 50, "a number of bytes");
    // It becomes the rank's CUDA_VISIBLE_DEVICES: letters, digits and dashes only.
    const std::string uuid = gpu.OptionalString("uuid").value_or("");
    if (uuid.size() > 96 || uuid.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
                                std::string::npos) {
      gpu.Fail("uuid", "must be at most 96 letters, digits and dashes (NVML's GPU-...)");
    }
    gpu.Finish();
    node.gpus.push_back({type, index, uuid});
  }
  fields.Finish();
  return node;
}

std::vector<NodeGpus> ListAllocationGpus(const SlurmAllocation& allocation, const std::string& srun,
                                         const std::string& agent) {
  const std::string nodes = std::to_string(allocation.nodes.size());
  const std::string output = RunToEnd({srun, "--nodes=" + nodes, "--ntasks=" + nodes, "--ntasks-per-node=1",
                                       "--kill-on-bad-exit=1", agent, "--list-gpus"});
  std::vector<NodeGpus> listed;
  for (const std::string& line : Lines(output)) {
    if (line.front() != '{') continue;  // srun's own notes
    listed.push_back(ParseNodeGpus(line, "poplar-agent --list-gpus"));
  }
  return listed;
}

int FreePortOnNode(const std::string& node, const std::string& srun, const std::string& agent) {
  const std::string output =
      RunToEnd({srun, "--nodes=1", "--ntasks=1", "--nodelist=" + node, "--kill-on-bad-exit=1", agent, "--free-port"});
  for (const std::string& line : Lines(output)) {
    if (line.empty() || line.size() > 5 || line.find_first_not_of("0123456789") != std::string::npos) continue;
    const int port = std::stoi(line);
    if (port > 0 && port < 65536) return port;
  }
  throw CommandFailed("--slurm: poplar-agent --free-port on node '" + node + "' printed no port:\n" + output);
}

std::vector<NodeSpec> AllocationNodes(const SlurmAllocation& allocation, const SlurmSpec& slurm,
                                      const std::vector<NodeGpus>& gpus) {
  std::vector<NodeSpec> nodes;
  for (const std::string& name : allocation.nodes) {
    NodeSpec node;
    node.name = name;
    node.host = allocation.addresses.at(name);
    std::string why_none = slurm.discover_gpus ? "its GPUs were not listed" : "slurm.gpus is none";
    for (const NodeGpus& listed : gpus) {
      if (listed.node != name) continue;
      for (const ListedGpu& gpu : listed.gpus) {
        if (!node.devices.empty() && node.devices.back().type == gpu.type) {
          ++node.devices.back().count;
        } else {
          node.devices.push_back({gpu.type, 1});
        }
      }
      why_none = listed.why_none.empty() ? "NVML lists no GPU" : listed.why_none;
    }
    for (const EmulatedDeviceSpec& device : slurm.emulated) node.devices.push_back({device.type, device.count});
    if (node.devices.empty()) {
      throw CommandFailed("--slurm: node '" + name + "' of the allocation offers no device: " + why_none +
                          ", and the cluster file's slurm.emulated declares none");
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace poplar
