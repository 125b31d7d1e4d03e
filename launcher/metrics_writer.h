// One JSON object per line, flushed per line, so that a reader (the agent, tailing the
// file for the head) can follow a running worker. Used by `train` (a line per step) and
// `network` (a line per measured collective).
#pragma once

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/input_error.h"

namespace poplar {

class MetricsWriter {
 public:
  // `pattern` may hold "{rank}", which becomes the rank: then every rank writes its own
  // file; without it only rank 0 writes. An empty pattern writes nothing.
  MetricsWriter(const std::string& pattern, int rank, bool append) {
    const std::string path = PathFor(pattern, rank);
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw InputError("--metrics", "", "cannot write " + path);
  }
  // The file `rank` writes for `pattern`; empty when it writes none.
  static std::string PathFor(const std::string& pattern, int rank) {
    const auto placeholder = pattern.find("{rank}");
    if (pattern.empty() || (placeholder == std::string::npos && rank != 0)) return "";
    std::string path = pattern;
    if (placeholder != std::string::npos) path.replace(placeholder, 6, std::to_string(rank));
    return path;
  }
  void Write(const nlohmann::json& line) {
    if (out_.is_open()) out_ << line.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

}  // namespace poplar
