// Slurm's lists of whole numbers, "0-1,3" ({0, 1, 3}): srun's task ranges
// ("tasks 0-2,5: Terminated") and a job's GPU ids (SLURM_JOB_GPUS), read as untrusted
// text.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace poplar {

// The numbers of `text`, comma-separated numbers and ranges "a-b" (a <= b) of at most
// `most_in_range` numbers each, in the order written; nullopt for anything else (empty
// items, signs, spaces, numbers of more than 7 digits).
std::optional<std::vector<int>> ParseNumberList(const std::string& text, int most_in_range = 1'000'000);

}  // namespace poplar
