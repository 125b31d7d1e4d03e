// When something done every N steps is due: checkpoints (--checkpoint-every) and the
// held-out evaluation (--eval-every), on the worker and as the head expects them.
#pragma once

#include <cstdint>

namespace poplar {

// Whether a thing done every `every` steps (0: none in between) and after the last step
// is due after step `step` (counting from 1) of a run that ends at `last_step`.
inline bool DueAfterStep(std::int64_t step, std::int64_t every, std::int64_t last_step) {
  return step == last_step || (every > 0 && step % every == 0);
}

}  // namespace poplar
