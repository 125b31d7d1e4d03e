#include "planner/search/search.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "planner/search/allocation.h"

namespace poplar {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// F(s) for one class: the least compute time of s samples on one device, and the
// micro-batches that achieve it. Grown on demand.
//
// F(s) = min over 1 <= b <= min(s, cap) of Time(b) + F(s - b). Time is piecewise linear
// in b (ComputeCurve), so on a segment [lo, hi] where Time(b) = Time(lo) + m (b - lo)
// the minimum over its b is Time(lo) + m (s - lo) + min over u = s - b in
// [s - hi, s - lo] of F(u) - m u: a sliding window, whose minimum a monotone deque keeps
// in O(1) per s. So each F(s) costs O(segments), not O(cap), which keeps large caps and
// batches fast.
class AccumulationCost {
 public:
  explicit AccumulationCost(const DeviceClass& device_class) {
    for (int b = 0; b <= device_class.max_micro_batch; ++b) time_.push_back(device_class.Time(b));
    // Segments of b over which Time is linear, found from its second differences (a
    // kink smaller than 1e-12 of the largest time is rounding, not a kink). A kink at b
    // ends one segment and starts the next.
    const int cap = this->cap();
    const double tolerance = 1e-12 * (cap > 0 ? time_[cap] : 0.0);
    int lo = 1;
    for (int b = 1; b <= cap; ++b) {
      const bool last = b == cap;
      const bool kink = !last && b > lo && std::abs((time_[b + 1] - time_[b]) - (time_[b] - time_[b - 1])) > tolerance;
      if (!last && !kink) continue;
      Segment segment;
      segment.lo = lo;
      segment.hi = b;
      segment.slope = b > lo ? (time_[b] - time_[lo]) / (b - lo) : 0.0;
      segments_.push_back(std::move(segment));
      lo = b;
    }
    // Largest micro-batches first, so that ties prefer fewer micro-batches.
    std::reverse(segments_.begin(), segments_.end());
  }

  int cap() const { return static_cast<int>(time_.size()) - 1; }
  const std::vector<double>& values() const { return best_; }
  std::int64_t size() const { return static_cast<std::int64_t>(best_.size()); }

  void Extend() {
    const std::int64_t s = size();
    double best = kInfinity;
    int choice = 0;
    for (Segment& segment : segments_) {
      // The window of u = s - b for b in [lo, min(hi, s)]: u in [s - hi, s - lo].
      const std::int64_t newest = s - segment.lo;
      if (newest < 0) continue;
      const double key = best_[newest] - segment.slope * static_cast<double>(newest);
      // Equal keys keep the older (smaller u: larger b) in front.
      while (!segment.window.empty() && segment.window.back().key > key) segment.window.pop_back();
      segment.window.push_back({newest, key});
      while (segment.window.front().u < s - segment.hi) segment.window.pop_front();
      const std::int64_t u = segment.window.front().u;
      const int b = static_cast<int>(s - u);
      const double candidate = time_[b] + best_[u];
      if (candidate < best) {
        best = candidate;
        choice = b;
      }
    }
    best_.push_back(best);
    last_.push_back(choice);
  }

  // Most samples s with F(s) <= limit among those computed.
  std::int64_t MostWithin(double limit) const {
    return std::upper_bound(best_.begin(), best_.end(), limit) - best_.begin() - 1;
  }

  std::vector<std::int64_t> MicroBatches(std::int64_t samples) const {
    std::vector<std::int64_t> parts;
    for (std::int64_t s = samples; s > 0; s -= last_[s]) parts.push_back(last_[s]);
    std::sort(parts.rbegin(), parts.rend());
    return parts;
  }

 private:
  std::vector<double> time_;        // time_[b]: one micro-batch of b samples
  std::vector<double> best_ = {0};  // best_[s] = F(s)
  std::vector<int> last_ = {0};     // one micro-batch of an optimal split of s
  struct Segment {
    int lo = 1, hi = 1;  // micro-batch sizes on which time_ is linear
    double slope = 0;
    struct Entry {
      std::int64_t u;  // s - b
      double key;      // best_[u] - slope * u
    };
    std::deque<Entry> window;  // keys increasing from the front
  };
  std::vector<Segment> segments_;  // largest sizes first
};

std::vector<int> UsableClasses(const StageProblem& problem) {
  std::vector<int> usable;
  for (int c = 0; c < static_cast<int>(problem.classes.size()); ++c) {
    if (problem.classes[c].max_micro_batch > 0) usable.push_back(c);
  }
  return usable;
}

void AddIdleClasses(const StageProblem& problem, int rounds, Schedule& schedule) {
  for (int c = 0; c < static_cast<int>(problem.classes.size()); ++c) {
    if (problem.classes[c].max_micro_batch > 0) continue;
    schedule.assignments.push_back({c, problem.classes[c].count, std::vector<int>(rounds, 0)});
  }
}

Schedule SearchPerStepSync(const StageProblem& problem) {
  const std::int64_t batch = problem.global_batch;
  const std::vector<int> usable = UsableClasses(problem);
  std::vector<AccumulationCost> costs;
  std::int64_t usable_devices = 0;
  for (int c : usable) {
    costs.emplace_back(problem.classes[c]);
    usable_devices += problem.classes[c].count;
  }

  // An upper bound on the optimum: every usable device takes ceil(B / devices).
  const std::int64_t even_share = (batch + usable_devices - 1) / usable_devices;
  double upper = 0;
  for (auto& cost : costs) {
    while (cost.size() <= even_share) cost.Extend();
    upper = std::max(upper, cost.values()[even_share]);
  }
  // No device takes more than it can finish within the bound.
  std::vector<double> candidates;
  for (auto& cost : costs) {
    while (cost.size() <= batch && cost.values().back() <= upper) cost.Extend();
    for (double value : cost.values()) {
      if (value <= upper) candidates.push_back(value);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());

  auto capacity = [&](double limit) {
    std::int64_t total = 0;
    for (std::size_t i = 0; i < usable.size(); ++i) {
      total += problem.classes[usable[i]].count * costs[i].MostWithin(limit);
    }
    return total;
  };
  // candidates[0] is F(0) = 0 with capacity 0 < B; the last candidate has capacity >= B.
  std::size_t low = 0, high = candidates.size() - 1;
  while (high - low > 1) {
    const std::size_t middle = (low + high) / 2;
    (capacity(candidates[middle]) >= batch ? high : low) = middle;
  }
  const double makespan = candidates[high];
  const double below = candidates[low];

  // Every device takes what fits strictly below the optimum; the rest goes to devices
  // that can take more within it, spread evenly inside each class.
  Schedule schedule;
  schedule.stage = problem.stage;
  std::int64_t remaining = batch;
  std::vector<std::int64_t> floor_samples(usable.size());
  for (std::size_t i = 0; i < usable.size(); ++i) {
    floor_samples[i] = costs[i].MostWithin(below);
    remaining -= problem.classes[usable[i]].count * floor_samples[i];
  }
  for (std::size_t i = 0; i < usable.size(); ++i) {
    const int count = problem.classes[usable[i]].count;
    const std::int64_t room = count * (costs[i].MostWithin(makespan) - floor_samples[i]);
    const std::int64_t extra = std::min(remaining, room);
    remaining -= extra;
    for (const Assignment& spread : SpreadOverClass(usable[i], count, {floor_samples[i] * count + extra}, false)) {
      Assignment assignment = spread;
      assignment.micro_batches.clear();
      for (std::int64_t part : costs[i].MicroBatches(spread.Samples())) {
        assignment.micro_batches.push_back(static_cast<int>(part));
      }
      schedule.assignments.push_back(std::move(assignment));
    }
  }
  AddIdleClasses(problem, 0, schedule);
  return schedule;
}

// One kind of reduce round: its slowest device takes `tau`, and each usable class's
// devices take up to caps[i] samples.
struct RoundKind {
  double tau = 0;
  std::int64_t capacity = 0;
  std::vector<std::int64_t> caps;
};

std::vector<RoundKind> RoundKinds(const StageProblem& problem, const std::vector<int>& usable) {
  std::vector<double> taus;
  for (int c : usable) {
    for (int b = 1; b <= problem.classes[c].max_micro_batch; ++b) {
      taus.push_back(problem.classes[c].Time(b));
    }
  }
  std::sort(taus.begin(), taus.end());
  taus.erase(std::unique(taus.begin(), taus.end()), taus.end());

  std::vector<RoundKind> kinds;
  std::vector<std::int64_t> caps(usable.size(), 0);
  for (double tau : taus) {
    std::int64_t capacity = 0;
    for (std::size_t i = 0; i < usable.size(); ++i) {
      const DeviceClass& device_class = problem.classes[usable[i]];
      while (caps[i] < device_class.max_micro_batch && device_class.Time(caps[i] + 1) <= tau) {
        ++caps[i];
      }
      capacity += device_class.count * caps[i];
    }
    // A kind that holds no more than a cheaper one is never needed; one that holds the
    // whole batch makes every costlier kind useless.
    if (!kinds.empty() && capacity <= kinds.back().capacity) continue;
    kinds.push_back({tau, capacity, caps});
    if (capacity >= problem.global_batch) break;
  }
  return kinds;
}

// Drops round kinds that no optimal schedule uses. With w_j = tau_j + per-round
// communication and rho = min_j w_j / K_j, every schedule costs at least rho * B, and one
// that uses kind j at least w_j + rho * max(0, B - K_j). Repeating the single best kind is
// a schedule, so its cost bounds the optimum from above; kinds whose lower bound exceeds
// it cannot appear in an optimum. Exact, and in practice it removes most small kinds.
std::vector<RoundKind> PruneRoundKinds(std::vector<RoundKind> kinds, std::int64_t batch, double comm_per_round) {
  double rho = kInfinity, upper = kInfinity;
  for (const auto& kind : kinds) {
    const double cost = kind.tau + comm_per_round;
    rho = std::min(rho, cost / static_cast<double>(kind.capacity));
    const std::int64_t repeats = (batch + kind.capacity - 1) / kind.capacity;
    upper = std::min(upper, static_cast<double>(repeats) * cost);
  }
  const double slack = 1e-9 * upper;  // rounding must never prune an optimal kind
  std::vector<RoundKind> kept;
  for (auto& kind : kinds) {
    const double lower =
        kind.tau + comm_per_round + rho * static_cast<double>(std::max<std::int64_t>(0, batch - kind.capacity));
    if (lower <= upper + slack) kept.push_back(std::move(kind));
  }
  return kept;
}

Schedule SearchPerRoundSync(const StageProblem& problem) {
  const std::int64_t batch = problem.global_batch;
  const std::vector<int> usable = UsableClasses(problem);
  const std::vector<RoundKind> kinds = PruneRoundKinds(RoundKinds(problem, usable), batch, problem.comm_per_round_s);

  // cost[x]: least time of rounds holding at least x samples; choice[x]: one kind used.
  std::vector<double> cost(batch + 1, kInfinity);
  std::vector<int> choice(batch + 1, -1);
  cost[0] = 0;
  for (std::int64_t x = 1; x <= batch; ++x) {
    // Kinds are in increasing capacity and cost: of those that cover x alone, only the
    // first can be best, so stop there.
    for (int j = 0; j < static_cast<int>(kinds.size()); ++j) {
      const std::int64_t rest = std::max<std::int64_t>(0, x - kinds[j].capacity);
      const double candidate = kinds[j].tau + problem.comm_per_round_s + cost[rest];
      if (candidate < cost[x] || (candidate == cost[x] && j > choice[x])) {
        cost[x] = candidate;
        choice[x] = j;
      }
      if (rest == 0) break;
    }
  }

  std::vector<int> rounds;
  for (std::int64_t x = batch; x > 0; x = std::max<std::int64_t>(0, x - kinds[choice[x]].capacity)) {
    rounds.push_back(choice[x]);
  }
  std::sort(rounds.rbegin(), rounds.rend());  // largest rounds first

  // Per round and class, the samples the class takes; the surplus over the global batch
  // comes off the smallest rounds, shared among classes in proportion to their room.
  std::vector<std::vector<std::int64_t>> class_totals(usable.size());
  std::int64_t surplus = -batch;
  for (int kind : rounds) surplus += kinds[kind].capacity;
  for (int r = static_cast<int>(rounds.size()) - 1; r >= 0; --r) {
    const RoundKind& kind = kinds[rounds[r]];
    const std::int64_t cut = std::min(surplus, kind.capacity - 1);
    surplus -= cut;
    std::vector<double> weights;
    std::vector<std::int64_t> limits;
    for (std::size_t i = 0; i < usable.size(); ++i) {
      limits.push_back(problem.classes[usable[i]].count * kind.caps[i]);
      weights.push_back(static_cast<double>(limits.back()));
    }
    const std::vector<std::int64_t> shares = ShareByWeight(kind.capacity - cut, weights, limits);
    for (std::size_t i = 0; i < usable.size(); ++i) class_totals[i].push_back(shares[i]);
  }
  Schedule schedule;
  schedule.stage = problem.stage;
  for (std::size_t i = 0; i < usable.size(); ++i) {
    std::reverse(class_totals[i].begin(), class_totals[i].end());
    for (Assignment& assignment : SpreadOverClass(usable[i], problem.classes[usable[i]].count, class_totals[i], true)) {
      schedule.assignments.push_back(std::move(assignment));
    }
  }
  AddIdleClasses(problem, static_cast<int>(rounds.size()), schedule);
  return schedule;
}

}  // namespace

std::optional<Schedule> SearchSchedule(const StageProblem& problem) {
  if (!problem.feasible) return std::nullopt;
  return problem.RoundsSynchronised() ? SearchPerRoundSync(problem) : SearchPerStepSync(problem);
}

}  // namespace poplar
