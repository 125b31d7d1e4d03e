// ComputeCurve: the time of one micro-batch (forward + backward) as a function of its
// size, from a device's measured points.
//
// Contract (docs/cost-model.md, "Compute"):
//  - Time(0) == 0; Time is non-decreasing in the micro-batch size.
//  - Between measured points: linear interpolation over the points made monotone
//    (each measured time raised to the largest time measured at a smaller size).
//  - Below the first point: the line through the first two points, but never below
//    the proportional share t0 * b / b0 (so a negative fitted overhead cannot make a
//    small micro-batch free). With one point: proportional.
//  - Above the last point: the last segment's slope continued (proportional with one
//    point), so memory caps beyond the measured range still get a time.
#pragma once

#include <utility>
#include <vector>

namespace poplar {

class ComputeCurve {
 public:
  ComputeCurve() = default;
  // `points`: (micro_batch, seconds) pairs with strictly increasing positive sizes and
  // positive times. Throws std::invalid_argument otherwise.
  explicit ComputeCurve(std::vector<std::pair<int, double>> points);

  double Time(int micro_batch) const;
  bool empty() const { return points_.empty(); }

 private:
  std::vector<std::pair<int, double>> points_;  // monotone in both coordinates
};

}  // namespace poplar
