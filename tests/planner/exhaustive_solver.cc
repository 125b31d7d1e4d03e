#include "exhaustive_solver.h"

#include <functional>
#include <limits>
#include <map>
#include <stdexcept>

#include "planner/search/simulator.h"

namespace poplar::testing {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Devices one by one, each with its class.
std::vector<int> DeviceClasses(const StageProblem& problem) {
  std::vector<int> devices;
  for (int c = 0; c < static_cast<int>(problem.classes.size()); ++c) {
    for (int i = 0; i < problem.classes[c].count; ++i) devices.push_back(c);
  }
  return devices;
}

Schedule PerDeviceSchedule(const StageProblem& problem, const std::vector<int>& devices,
                           const std::vector<std::vector<int>>& lists) {
  Schedule schedule;
  schedule.stage = problem.stage;
  for (std::size_t d = 0; d < devices.size(); ++d) schedule.assignments.push_back({devices[d], 1, lists[d]});
  return schedule;
}

ReferenceOptimum SolvePerStepSync(const StageProblem& problem) {
  const std::vector<int> devices = DeviceClasses(problem);
  const int batch = static_cast<int>(problem.global_batch);
  // cheapest[c][s]: the cheapest composition of s samples on class c, by enumeration.
  std::vector<std::vector<std::pair<double, std::vector<int>>>> cheapest(problem.classes.size());
  for (std::size_t c = 0; c < problem.classes.size(); ++c) {
    const DeviceClass& device_class = problem.classes[c];
    cheapest[c].assign(batch + 1, {kInfinity, {}});
    std::vector<int> parts;
    std::function<void(int, double)> compose = [&](int left, double time) {
      const int s = [&] {
        int t = 0;
        for (int p : parts) t += p;
        return t;
      }();
      if (time < cheapest[c][s].first) cheapest[c][s] = {time, parts};
      for (int b = 1; b <= std::min(left, device_class.max_micro_batch); ++b) {
        parts.push_back(b);
        compose(left - b, time + device_class.Time(b));
        parts.pop_back();
      }
    };
    compose(batch, 0.0);
  }
  ReferenceOptimum best{kInfinity, {}};
  std::vector<std::vector<int>> lists(devices.size());
  std::function<void(std::size_t, int)> distribute = [&](std::size_t d, int left) {
    if (d == devices.size()) {
      if (left != 0) return;
      Schedule schedule = PerDeviceSchedule(problem, devices, lists);
      const double step = Simulate(problem, schedule).step_s;
      if (step < best.step_s) best = {step, schedule};
      return;
    }
    for (int s = 0; s <= left; ++s) {
      if (cheapest[devices[d]][s].first == kInfinity) continue;
      lists[d] = cheapest[devices[d]][s].second;
      distribute(d + 1, left - s);
    }
  };
  distribute(0, batch);
  return best;
}

ReferenceOptimum SolvePerRoundSync(const StageProblem& problem) {
  const std::vector<int> devices = DeviceClasses(problem);
  const int batch = static_cast<int>(problem.global_batch);
  // Every round vector, keyed by its sample count, cheapest kept.
  std::map<int, std::pair<double, std::vector<int>>> rounds;
  std::vector<int> vector(devices.size(), 0);
  std::function<void(std::size_t)> enumerate = [&](std::size_t d) {
    if (d == devices.size()) {
      int samples = 0;
      double slowest = 0;
      for (std::size_t i = 0; i < devices.size(); ++i) {
        samples += vector[i];
        slowest = std::max(slowest, problem.classes[devices[i]].Time(vector[i]));
      }
      const double cost = slowest + problem.comm_per_round_s;
      if (samples == 0 || samples > batch) return;
      auto found = rounds.find(samples);
      if (found == rounds.end() || cost < found->second.first) rounds[samples] = {cost, vector};
      return;
    }
    for (int b = 0; b <= problem.classes[devices[d]].max_micro_batch; ++b) {
      vector[d] = b;
      enumerate(d + 1);
    }
  };
  enumerate(0);
  // least[x]: cheapest rounds with exactly x samples.
  std::vector<double> least(batch + 1, kInfinity);
  std::vector<int> last(batch + 1, 0);
  least[0] = 0;
  for (int x = 1; x <= batch; ++x) {
    for (const auto& [samples, round] : rounds) {
      if (samples <= x && least[x - samples] + round.first < least[x]) {
        least[x] = least[x - samples] + round.first;
        last[x] = samples;
      }
    }
  }
  if (least[batch] == kInfinity) throw std::logic_error("no schedule");
  std::vector<std::vector<int>> lists(devices.size());
  for (int x = batch; x > 0; x -= last[x]) {
    const std::vector<int>& round = rounds.at(last[x]).second;
    for (std::size_t d = 0; d < devices.size(); ++d) lists[d].push_back(round[d]);
  }
  Schedule schedule = PerDeviceSchedule(problem, devices, lists);
  return {Simulate(problem, schedule).step_s, schedule};
}

}  // namespace

ReferenceOptimum SolveExhaustively(const StageProblem& problem) {
  return problem.RoundsSynchronised() ? SolvePerRoundSync(problem) : SolvePerStepSync(problem);
}

}  // namespace poplar::testing
