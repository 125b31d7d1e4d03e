#include "planner/model/compute_curve.h"

#include <algorithm>
#include <stdexcept>

namespace poplar {

ComputeCurve::ComputeCurve(std::vector<std::pair<int, double>> points) : points_(std::move(points)) {
  if (points_.empty()) throw std::invalid_argument("ComputeCurve needs at least one point");
  for (std::size_t i = 0; i < points_.size(); ++i) {
    if (points_[i].first <= 0 || !(points_[i].second > 0)) {
      throw std::invalid_argument("ComputeCurve points must be positive");
    }
    if (i > 0) {
      if (points_[i].first <= points_[i - 1].first) {
        throw std::invalid_argument("ComputeCurve sizes must increase");
      }
      points_[i].second = std::max(points_[i].second, points_[i - 1].second);
    }
  }
}

double ComputeCurve::Time(int micro_batch) const {
  if (micro_batch <= 0 || points_.empty()) return 0.0;
  const auto& first = points_.front();
  const auto& last = points_.back();
  auto segment_slope = [](const std::pair<int, double>& a, const std::pair<int, double>& b) {
    return (b.second - a.second) / (b.first - a.first);
  };
  if (micro_batch <= first.first) {
    const double proportional = first.second * micro_batch / first.first;
    if (points_.size() == 1) return proportional;
    const double line = first.second - segment_slope(first, points_[1]) * (first.first - micro_batch);
    return std::min(std::max(line, proportional), first.second);
  }
  if (micro_batch >= last.first) {
    const double slope =
        points_.size() == 1 ? last.second / last.first : segment_slope(points_[points_.size() - 2], last);
    return last.second + slope * (micro_batch - last.first);
  }
  auto upper = std::lower_bound(points_.begin(), points_.end(), micro_batch,
                                [](const std::pair<int, double>& p, int b) { return p.first < b; });
  if (upper->first == micro_batch) return upper->second;
  const auto& lower = *(upper - 1);
  // Clamped so that rounding cannot lift an interpolated time above the next point.
  const double interpolated = lower.second + segment_slope(lower, *upper) * (micro_batch - lower.first);
  return std::min(interpolated, upper->second);
}

}  // namespace poplar
