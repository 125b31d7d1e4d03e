#include "planner/cluster/emulated_device.h"

#include <set>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/number_list.h"
#include "planner/base/number_text.h"
#include "planner/base/yaml_fields.h"
#include "planner/formats/profile.h"

namespace poplar {
namespace {

// The highest CPU number a worker can bind to (glibc's cpu_set_t holds 1,024).
constexpr int kMostCpu = 1023;

// `cpus`: "0-3,8" (or one number), `wanted` distinct CPUs of at most kMostCpu.
std::vector<int> ParseCpus(YamlFields& fields, int wanted) {
  const YAML::Node node = fields.Child("cpus");  // 1 and "0-3,8" alike: numbers or a list's text
  if (!node.IsScalar()) fields.Fail("cpus", "must be a CPU or a list of CPUs (\"0-3,8\")");
  const std::string text = node.Scalar();
  const std::optional<std::vector<int>> cpus = ParseNumberList(text, kMostCpu + 1);
  if (!cpus) fields.Fail("cpus", "'" + text.substr(0, 100) + "' is not a list of CPUs (\"0-3,8\")");
  std::set<int> seen;
  for (const int cpu : *cpus) {
    if (cpu > kMostCpu) fields.Fail("cpus", "CPU " + std::to_string(cpu) + " is above " + std::to_string(kMostCpu));
    if (!seen.insert(cpu).second) fields.Fail("cpus", "names CPU " + std::to_string(cpu) + " twice");
  }
  if (static_cast<int>(cpus->size()) != wanted) {
    fields.Fail("cpus", "names " + std::to_string(cpus->size()) + " CPUs; count x threads is " +
                            std::to_string(wanted) + " (each device's threads run on CPUs of their own)");
  }
  return *cpus;
}

EmulatedDeviceSpec ParseEmulated(YamlFields fields) {
  EmulatedDeviceSpec device;
  device.type = fields.String("type");
  // The rule cluster files apply: a type the head refuses could never be used.
  if (const std::string problem = DeviceTypeProblem(device.type); !problem.empty()) fields.Fail("type", problem);
  if (fields.Has("count")) {
    device.count = static_cast<int>(fields.IntegerIn("count", 1, 1024, "a number of devices"));
  }
  if (fields.Has("threads")) {
    device.threads = static_cast<int>(fields.IntegerIn("threads", 1, 1024, "a number of threads"));
  }
  if (fields.Has("slowdown")) {
    device.slowdown = fields.NumberIn("slowdown", 1, 1000, "a slowdown factor");
  }
  if (fields.Has("gflops")) device.gflops = fields.NumberIn("gflops", 0.001, 1e9, "a rate in GFLOP/s");
  device.memory_bytes = fields.IntegerIn("memory_mib", 1, std::int64_t{1} << 30, "a number of MiB") << 20;
  if (fields.Has("later")) {
    YamlFields later = fields.Map("later");
    device.later_step = later.IntegerIn("step", 1, std::int64_t{1} << 40, "a step of the run");
    device.later_slowdown = later.NumberIn("slowdown", 1, 1000, "a slowdown factor");
    later.Finish();
  }
  if (fields.Has("cpus")) device.cpus = ParseCpus(fields, device.count * device.threads);
  fields.Finish();
  return device;
}

}  // namespace

std::vector<EmulatedDeviceSpec> ParseEmulatedDevices(YamlFields& fields, const std::string& key) {
  std::vector<EmulatedDeviceSpec> devices;
  if (!fields.Has(key)) return devices;
  YAML::Node list = fields.Child(key);
  if (!list.IsSequence()) fields.Fail(key, "must be a list of {type, count, threads, slowdown, memory_mib}");
  std::set<std::string> types;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    devices.push_back(ParseEmulated(YamlFields(list[i], fields.file(), fields.KeyPath(item))));
    if (!types.insert(devices.back().type).second) {
      throw InputError(fields.file(), fields.KeyPath(item) + ".type",
                       "'" + devices.back().type + "' is declared twice");
    }
  }
  return devices;
}

std::vector<int> DeviceCpus(const EmulatedDeviceSpec& spec, int k) {
  const std::size_t first = static_cast<std::size_t>(k) * spec.threads;
  if (spec.cpus.size() < first + spec.threads) return {};
  return {spec.cpus.begin() + first, spec.cpus.begin() + first + spec.threads};
}

std::vector<std::string> EmulatedWorkerFlags(const EmulatedDeviceSpec& spec, int k, bool training) {
  std::vector<std::string> flags = {"--threads",      std::to_string(spec.threads),
                                    "--slowdown",     ShortestText(spec.slowdown),
                                    "--memory-bytes", std::to_string(spec.memory_bytes)};
  if (spec.gflops > 0) flags.insert(flags.end(), {"--gflops", ShortestText(spec.gflops)});
  if (const std::vector<int> cpus = DeviceCpus(spec, k); !cpus.empty()) {
    flags.insert(flags.end(), {"--cpus", Join(cpus, ",", [](int cpu) { return std::to_string(cpu); })});
  }
  if (training && spec.later_step > 0) {
    flags.insert(flags.end(), {"--later-slowdown-step", std::to_string(spec.later_step), "--later-slowdown",
                               ShortestText(spec.later_slowdown)});
  }
  return flags;
}

}  // namespace poplar
