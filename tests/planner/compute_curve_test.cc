#include "planner/compute_curve.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

TEST(ComputeCurve, InterpolatesBetweenPoints) {
  ComputeCurve curve({{2, 1.0}, {4, 3.0}});
  EXPECT_DOUBLE_EQ(curve.Time(3), 2.0);
}

}  // namespace
}  // namespace poplar
