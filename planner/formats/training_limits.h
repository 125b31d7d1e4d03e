// Limits on training settings that the cluster file (job.*) and the worker's flags
// share, so that the head refuses what the worker would.
#pragma once

#include <cstdint>

namespace poplar {

// The most optimizer steps a job may ask for, and the bound on the worker's other
// counts of steps or samples (--decay-steps, --checkpoint-every, --eval-samples, ...):
// a larger number is refused, never saturated to INT64_MAX.
inline constexpr std::int64_t kMostJobSteps = std::int64_t{1} << 40;

// The largest learning rate taken: larger ones only diverge, and from about 1e37 the
// fp32 update overflows inside libtorch ("cannot be converted to type float"), an error
// that names nothing.
inline constexpr double kMostLearningRate = 1e6;

// The worker's --lr when none is given (nanoGPT's for GPT-2 small).
inline constexpr double kDefaultLearningRate = 6e-4;

}  // namespace poplar
