#include "planner/model/compute_curve.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

namespace poplar {
namespace {

TEST(ComputeCurve, ZeroSamplesTakeNoTime) { EXPECT_EQ(ComputeCurve({{2, 1.0}}).Time(0), 0.0); }

TEST(ComputeCurve, HitsMeasuredPointsAndInterpolatesBetween) {
  ComputeCurve curve({{2, 1.0}, {4, 3.0}, {8, 4.0}});
  EXPECT_DOUBLE_EQ(curve.Time(2), 1.0);
  EXPECT_DOUBLE_EQ(curve.Time(3), 2.0);
  EXPECT_DOUBLE_EQ(curve.Time(4), 3.0);
  EXPECT_DOUBLE_EQ(curve.Time(6), 3.5);
  EXPECT_DOUBLE_EQ(curve.Time(8), 4.0);
}

TEST(ComputeCurve, ExtrapolatesBelowWithTheFirstSegmentButNotBelowProportional) {
  // Fixed overhead 1 s + 0.5 s/sample: below the first point the line keeps its overhead.
  ComputeCurve with_overhead({{4, 3.0}, {8, 5.0}});
  EXPECT_DOUBLE_EQ(with_overhead.Time(2), 2.0);
  // Super-linear points would extrapolate to a negative overhead; proportional wins.
  ComputeCurve superlinear({{4, 1.0}, {8, 5.0}});
  EXPECT_DOUBLE_EQ(superlinear.Time(2), 0.5);
}

TEST(ComputeCurve, ExtrapolatesAboveWithTheLastSlope) {
  ComputeCurve curve({{1, 1.0}, {2, 1.5}});
  EXPECT_DOUBLE_EQ(curve.Time(4), 2.5);
  EXPECT_DOUBLE_EQ(ComputeCurve({{2, 1.0}}).Time(6), 3.0);  // one point: proportional
}

TEST(ComputeCurve, NoisyMeasurementsBecomeMonotone) {
  ComputeCurve curve({{1, 2.0}, {2, 1.0}, {3, 3.0}});  // 2 measured faster than 1
  EXPECT_DOUBLE_EQ(curve.Time(2), 2.0);
  EXPECT_LE(curve.Time(1), curve.Time(2));
}

TEST(ComputeCurve, IsMonotoneOnRandomMeasurements) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> time(0.01, 5.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::pair<int, double>> points;
    for (int b = 1 + trial % 3; b < 40; b += 1 + static_cast<int>(rng() % 7)) {
      points.emplace_back(b, time(rng));
    }
    ComputeCurve curve(points);
    for (int b = 0; b < 60; ++b) ASSERT_LE(curve.Time(b), curve.Time(b + 1)) << "trial " << trial;
  }
}

TEST(ComputeCurve, RejectsInvalidPoints) {
  EXPECT_THROW(ComputeCurve(std::vector<std::pair<int, double>>{}), std::invalid_argument);
  EXPECT_THROW(ComputeCurve({{0, 1.0}}), std::invalid_argument);
  EXPECT_THROW(ComputeCurve({{2, 1.0}, {2, 2.0}}), std::invalid_argument);
  EXPECT_THROW(ComputeCurve({{1, -1.0}}), std::invalid_argument);
}

}  // namespace
}  // namespace poplar
