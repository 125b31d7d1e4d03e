// The run directory's per-rank files: every line a rank wrote in logs/rank-R.log and
// every metrics record in metrics/rank-R.jsonl, appended as the events arrive, so that
// what the run did stays readable however `poplar launch` ends.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <string>

namespace poplar {

class RankFiles {
 public:
  // Makes run_dir/logs and run_dir/metrics; an empty `run_dir` keeps nothing.
  explicit RankFiles(std::string run_dir);

  void Log(int rank, const std::string& line);
  void Metrics(int rank, const std::string& json_line);

 private:
  // run_dir/<folder>/rank-<rank><suffix>, opened for appending on first use.
  std::ofstream& File(std::map<int, std::unique_ptr<std::ofstream>>& files, const char* folder, const char* suffix,
                      int rank);

  std::string run_dir_;
  std::map<int, std::unique_ptr<std::ofstream>> logs_, metrics_;
};

}  // namespace poplar
