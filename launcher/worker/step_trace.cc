#include "launcher/worker/step_trace.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "launcher/device/device.h"
#include "planner/base/text_file.h"

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

// The trace file's object (step_trace.h) of the profiler's events.
nlohmann::ordered_json Summary(const profiler::ProfilerResult& result, std::int64_t step, int rank,
                               torch::Device device, double step_s) {
  struct Total {
    std::int64_t count = 0;
    double seconds = 0;
  };
  // Kineto also gives a device-side copy of each host range (record_function's, such as
  // PyTorch's "Optimizer.step#AdamW.step") that spans the kernels inside it: not a kernel,
  // and known by the name of a host event, which no kernel has.
  std::set<std::string> host_names;
  for (const auto& event : result.events()) {
    if (event.deviceType() == c10::DeviceType::CPU) host_names.insert(event.name());
  }
  std::map<std::pair<std::string, std::string>, Total> totals;  // (on, name)
  std::int64_t device_events = 0;
  for (const auto& event : result.events()) {
    const bool on_host = event.deviceType() == c10::DeviceType::CPU;
    if (!on_host && host_names.count(event.name()) > 0) continue;
    if (!on_host) ++device_events;
    Total& total = totals[{c10::DeviceTypeName(event.deviceType(), /*lower_case=*/true), event.name()}];
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
  return {{"step", step},
          {"rank", rank},
          {"device", device.str()},
          {"libtorch", TORCH_VERSION},
          {"step_s", step_s},
          {"device_events", device_events},
          {"events", std::move(events)}};
}

}  // namespace

StepTrace::StepTrace(std::string path, std::int64_t nth, std::int64_t first_step, std::int64_t last_step,
                     torch::Device device, int rank)
    : path_(std::move(path)),
      step_(path_.empty() || first_step >= last_step ? 0 : std::min(first_step + nth, last_step)),
      device_(device),
      rank_(rank) {
  if (!path_.empty() && step_ == 0) {
    std::fprintf(stderr,
                 "poplar-worker[rank %d]: warning: --trace: nothing to trace: the run resumes at step %lld of %lld\n",
                 rank_, static_cast<long long>(first_step), static_cast<long long>(last_step));
  }
}

StepTrace::~StepTrace() {
  if (!running_) return;
  try {
    profiler::disableProfiler();  // a step that failed: nothing is written
  } catch (...) {
    // Already failing: that error is the one reported.
  }
}

void StepTrace::BeforeStep(std::int64_t step) {
  if (step != step_) return;
  Synchronize(device_);  // the previous step's kernels stay out of this one's
  try {
    const profiler::ProfilerConfig config(ProfilerState::KINETO);
    const std::set<ActivityType> activities = Activities(device_);
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
    running_ = true;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "poplar-worker[rank %d]: warning: --trace: libtorch's profiler did not start: %s\n", rank_,
                 FirstLine(error.what()).c_str());
  }
}

void StepTrace::AfterStep(std::int64_t step, double step_s) {
  if (step != step_ || !running_) return;
  Synchronize(device_);  // (a device that fails here fails the run; the destructor stops the profiler)
  running_ = false;
  // A diagnostic: a trace that cannot be made or written costs a warning, not the run.
  try {
    const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
    WriteFileAtomically(path_, Summary(*result, step, rank_, device_, step_s).dump(1) + "\n");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "poplar-worker[rank %d]: warning: --trace: step %lld was not traced: %s\n", rank_,
                 static_cast<long long>(step), FirstLine(error.what()).c_str());
  }
}

}  // namespace poplar
