// Integer splitting helpers shared by the search and the baselines.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/search/schedule.h"

namespace poplar {

// `total` split into `parts` integers that differ by at most one, larger first.
std::vector<int> SplitEvenly(std::int64_t total, int parts);

// `total` split into integer shares proportional to `weights` (largest remainder),
// with share[i] <= limits[i]. Requires total <= sum(limits).
std::vector<std::int64_t> ShareByWeight(std::int64_t total, const std::vector<double>& weights,
                                        const std::vector<std::int64_t>& limits);

// The assignments of one class whose `count` devices share, in every round r,
// round_totals[r] samples as evenly as possible (the first devices take the extra
// sample). Devices that end with identical lists are one Assignment, so the result has
// at most rounds + 1 entries whatever the count. Zero entries are kept when
// `keep_zero_entries` (stages 2-3) and dropped otherwise.
std::vector<Assignment> SpreadOverClass(int device_class, int count, const std::vector<std::int64_t>& round_totals,
                                        bool keep_zero_entries);

}  // namespace poplar
