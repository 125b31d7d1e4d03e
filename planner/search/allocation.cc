#include "planner/search/allocation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace poplar {

std::vector<int> SplitEvenly(std::int64_t total, int parts) {
  std::vector<int> result;
  if (parts <= 0) return result;
  const std::int64_t base = total / parts;
  const std::int64_t extra = total % parts;
  for (int i = 0; i < parts; ++i) result.push_back(static_cast<int>(base + (i < extra ? 1 : 0)));
  return result;
}

std::vector<std::int64_t> ShareByWeight(std::int64_t total, const std::vector<double>& weights,
                                        const std::vector<std::int64_t>& limits) {
  const double weight_sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<std::int64_t> shares(weights.size(), 0);
  std::vector<double> remainders(weights.size(), 0.0);
  std::int64_t given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double exact = weight_sum > 0 ? total * (weights[i] / weight_sum) : 0.0;
    shares[i] = std::min<std::int64_t>(limits[i], static_cast<std::int64_t>(std::floor(exact)));
    remainders[i] = exact - static_cast<double>(shares[i]);
    given += shares[i];
  }
  // Hand out what rounding (and the limits) left, largest remainder first.
  std::vector<std::size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return remainders[a] > remainders[b]; });
  // The floors leave fewer samples than there are weights: one each, largest remainder
  // first. Shares clipped by a limit can leave more: a greedy pass places those.
  for (std::int64_t most : {std::int64_t{1}, total}) {
    for (std::size_t i : order) {
      const std::int64_t step = std::min({most, limits[i] - shares[i], total - given});
      shares[i] += step;
      given += step;
    }
  }
  if (given != total) throw std::logic_error("ShareByWeight: total exceeds the limits");
  return shares;
}

std::vector<Assignment> SpreadOverClass(int device_class, int count, const std::vector<std::int64_t>& round_totals,
                                        bool keep_zero_entries) {
  // In round r, devices [0, extra_r) take base_r + 1 samples, the others base_r. Device
  // lists only change where some extra_r boundary falls, so cut the class there.
  std::vector<std::int64_t> cuts = {0, count};
  for (std::int64_t total : round_totals) cuts.push_back(total % count);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  std::vector<Assignment> assignments;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::int64_t first_device = cuts[i];
    Assignment assignment;
    assignment.device_class = device_class;
    assignment.count = static_cast<int>(cuts[i + 1] - cuts[i]);
    for (std::int64_t total : round_totals) {
      const int samples = static_cast<int>(total / count + (first_device < total % count ? 1 : 0));
      if (samples > 0 || keep_zero_entries) assignment.micro_batches.push_back(samples);
    }
    assignments.push_back(std::move(assignment));
  }
  return assignments;
}

}  // namespace poplar
