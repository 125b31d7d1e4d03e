// A run's line of training: the checkpoints that lead to its state. Its own, and for
// each run it went on from by --resume (however many, one after another) those up to
// the step it went on from. A folder of checkpoints may hold other lines too: a run
// resumed from an earlier step leaves the abandoned run's later checkpoints there, and
// checkpoints at steps where the new run writes none. --keep-checkpoints counts only the
// line's (PruneCheckpoints), so every meta.json records its line: the writing run's id
// and the runs it went on from (docs/formats.md, "run" and "line").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "planner/base/json_fields.h"

namespace poplar {

// A run this one went on from, and the step of the checkpoint it went on from. Run 0 is
// unknown: the checkpoint recorded no run.
struct LineAncestor {
  std::uint64_t run = 0;
  std::int64_t step = 0;
  bool operator==(const LineAncestor& other) const { return run == other.run && step == other.step; }
};

struct CheckpointLine {
  std::uint64_t run = 0;                // the writing run's id (NewRunId); 0: records none
  std::vector<LineAncestor> ancestors;  // oldest first

  // Whether the checkpoint of step `step` written by run `writer` (0: one that records
  // no run) is on this line.
  bool Holds(std::uint64_t writer, std::int64_t step) const;
  // The line of run `next`, which goes on from this line's checkpoint of step `step`.
  CheckpointLine ContinuedBy(std::uint64_t next, std::int64_t step) const;
};

// A fresh run id: random, never 0.
std::uint64_t NewRunId();

// Adds meta.json's "run" (16 hex digits) and "line" (a list of {"run", "step"}, oldest
// first) for `line`; nothing for a line of run 0.
void AddLineKeys(const CheckpointLine& line, nlohmann::ordered_json& meta);

// AddLineKeys's keys back from `fields`, as strictly as every JSON file poplar reads;
// run 0 and no ancestors when both are absent (a checkpoint that records no line).
// Throws InputError naming fields' file and the key.
CheckpointLine ReadLineKeys(JsonFields& fields);

}  // namespace poplar
