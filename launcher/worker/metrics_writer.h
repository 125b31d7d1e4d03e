// One JSON object per line, written whole per line, so that a reader (the agent, tailing
// the file for the head) can follow a running worker. Used by `train` (a line per step)
// and `network` (a line per measured collective).
//
// The file is opened when the writer is made, before the rank meets the others, so that
// an output it cannot write stops it there (and its error reaches them), not after the
// rendezvous: a regular file is made if missing and kept as it is until Start; a pipe
// must have a reader already (a pipe without one would block the open forever);
// /dev/stdout, /dev/stderr and /dev/fd/N write to this process's own descriptor, at its
// offset, so that the lines join the rest of its output instead of overwriting it. A
// write that fails (a full disk, a reader that went away) is an error, not a lost line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace poplar {

class MetricsWriter {
 public:
  // `pattern` may hold "{rank}", which becomes the rank: then every rank writes its own
  // file; without it only rank 0 writes. An empty pattern writes nothing. Throws
  // InputError naming --metrics.
  MetricsWriter(const std::string& pattern, int rank);
  ~MetricsWriter();
  MetricsWriter(MetricsWriter&& other) noexcept;
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Before the first line: a regular file named directly is emptied unless `append` (a
  // resumed run adds to its lines). A device, a pipe or a descriptor is never emptied.
  void Start(bool append);
  // Throws InputError naming --metrics and the file when the line cannot be written.
  void Write(const nlohmann::json& line);

  // The file `rank` writes for `pattern`, every "{rank}" replaced; empty when it writes
  // none.
  static std::string PathFor(const std::string& pattern, int rank);

 private:
  std::string path_;
  int fd_ = -1;
  bool emptiable_ = false;  // a regular file opened by its name
};

}  // namespace poplar
