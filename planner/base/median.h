// The median of measured times, which one slow outlier does not move: the worker's
// profile points and the head's run summary report it.
#pragma once

#include <algorithm>
#include <vector>

namespace poplar {

// The middle value (the upper one of an even count); 0 for no values.
inline double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

}  // namespace poplar
