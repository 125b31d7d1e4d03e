#include "planner/formats/checkpoint_line.h"

#include <algorithm>
#include <random>
#include <string>

namespace poplar {

bool CheckpointLine::Holds(std::uint64_t writer, std::int64_t step) const {
  if (writer != 0 && writer == run) return true;
  return std::any_of(ancestors.begin(), ancestors.end(),
                     [&](const LineAncestor& ancestor) { return ancestor.run == writer && step <= ancestor.step; });
}

CheckpointLine CheckpointLine::ContinuedBy(std::uint64_t next, std::int64_t step) const {
  CheckpointLine continued{next, ancestors};
  continued.ancestors.push_back({run, step});
  return continued;
}

std::uint64_t NewRunId() {
  std::random_device device;
  std::uint64_t id = 0;
  while (id == 0) id = (std::uint64_t{device()} << 32) ^ device();
  return id;
}

void AddLineKeys(const CheckpointLine& line, nlohmann::ordered_json& meta) {
  if (line.run == 0) return;
  meta["run"] = Hex64Text(line.run);
  nlohmann::ordered_json ancestors = nlohmann::ordered_json::array();
  for (const LineAncestor& ancestor : line.ancestors) {
    ancestors.push_back({{"run", Hex64Text(ancestor.run)}, {"step", ancestor.step}});
  }
  meta["line"] = ancestors;
}

CheckpointLine ReadLineKeys(JsonFields& fields) {
  CheckpointLine line;
  if (!fields.Has("run") && !fields.Has("line")) return line;
  line.run = fields.Hex64("run");
  if (line.run == 0) fields.Fail("run", "must not be 0 (it stands for a run that recorded no id)");
  const nlohmann::json& ancestors = fields.List("line", 0, "a list of {run, step}, oldest first ([] for none)");
  std::int64_t previous = 0;
  for (std::size_t i = 0; i < ancestors.size(); ++i) {
    const std::string key = "line[" + std::to_string(i) + "]";
    JsonFields ancestor(ancestors[i], fields.file(), fields.KeyPath(key));
    LineAncestor& read = line.ancestors.emplace_back();
    read.run = ancestor.Hex64("run");
    // A run goes on from one line once: its id again is a loop, never a line.
    const bool repeated = read.run == line.run || std::any_of(line.ancestors.begin(), line.ancestors.end() - 1,
                                                              [&](const LineAncestor& a) { return a.run == read.run; });
    if (read.run != 0 && repeated) ancestor.Fail("run", "is in the line twice (or is the checkpoint's own run)");
    read.step = ancestor.Integer("step");
    // A run writes after the step it went on from, so the next went on from one as late.
    if (read.step < previous) {
      ancestor.Fail("step", "must be at least the step before it in the line (" + std::to_string(previous) + ")");
    }
    previous = read.step;
    ancestor.Finish();
  }
  return line;
}

}  // namespace poplar
