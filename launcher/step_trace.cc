#include "launcher/step_trace.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include "launcher/device.h"
#include "planner/text_file.h"

namespace poplar {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerState;

// An event's duration: libtorch 2 counts nanoseconds (durationNs), 1.13 microseconds.
template <typename Event>
auto DurationSeconds(const Event& event, int) -> decltype(event.durationNs(), double()) {
  return static_cast<double>(event.durationNs()) * 1e-9;
}
template <typename Event>
double DurationSeconds(const Event& event, long) {
  return static_cast<double>(event.durationUs()) * 1e-6;
}

std::set<ActivityType> Activities(torch::Device device) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

}  // namespace

StepTrace::StepTrace(std::string path, torch::Device device, int rank)
    : path_(std::move(path)), device_(device), rank_(rank) {}

StepTrace::~StepTrace() {
  if (!running_) return;
  try {
    profiler::disableProfiler();  // a step that failed: nothing is written
  } catch (...) {
    // Already failing: that error is the one reported.
  }
}

void StepTrace::Start() {
  if (!enabled()) return;
  Synchronize(device_);  // the previous step's kernels stay out of this one's
  const profiler::ProfilerConfig config(ProfilerState::KINETO);
  profiler::prepareProfiler(config, Activities(device_));
  profiler::enableProfiler(config, Activities(device_));
  running_ = true;
}

void StepTrace::Finish(std::int64_t step, double step_s) {
  if (!running_) return;
  Synchronize(device_);
  running_ = false;
  const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();

  struct Total {
    std::int64_t count = 0;
    double seconds = 0;
  };
  std::map<std::pair<std::string, std::string>, Total> totals;  // (on, name)
  std::int64_t device_events = 0;
  for (const auto& event : result->events()) {
    const std::string on = c10::DeviceTypeName(event.deviceType(), /*lower_case=*/true);
    if (event.deviceType() != c10::DeviceType::CPU) ++device_events;
    Total& total = totals[{on, event.name()}];
    total.count += 1;
    total.seconds += DurationSeconds(event, 0);
  }
  std::vector<std::pair<std::pair<std::string, std::string>, Total>> sorted(totals.begin(), totals.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const auto& [key, total] : sorted) {
    events.push_back({{"name", key.second}, {"on", key.first}, {"count", total.count}, {"total_s", total.seconds}});
  }
  const nlohmann::ordered_json trace = {{"step", step},         {"rank", rank_},
                                        {"device", device_.str()}, {"libtorch", TORCH_VERSION},
                                        {"step_s", step_s},     {"device_events", device_events},
                                        {"events", std::move(events)}};
  WriteFileAtomically(path_, trace.dump(1) + "\n");
}

}  // namespace poplar
