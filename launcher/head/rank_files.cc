#include "launcher/head/rank_files.h"

#include <filesystem>
#include <utility>

namespace poplar {

RankFiles::RankFiles(std::string run_dir) : run_dir_(std::move(run_dir)) {
  if (run_dir_.empty()) return;
  std::filesystem::create_directories(std::filesystem::path(run_dir_) / "logs");
  std::filesystem::create_directories(std::filesystem::path(run_dir_) / "metrics");
}

void RankFiles::Log(int rank, const std::string& line) {
  if (!run_dir_.empty()) File(logs_, "logs", ".log", rank) << line << std::endl;
}

void RankFiles::Metrics(int rank, const std::string& json_line) {
  if (!run_dir_.empty()) File(metrics_, "metrics", ".jsonl", rank) << json_line << std::endl;
}

std::ofstream& RankFiles::File(std::map<int, std::unique_ptr<std::ofstream>>& files, const char* folder,
                               const char* suffix, int rank) {
  auto& file = files[rank];
  if (!file) {
    file = std::make_unique<std::ofstream>(
        std::filesystem::path(run_dir_) / folder / ("rank-" + std::to_string(rank) + suffix), std::ios::app);
  }
  return *file;
}

}  // namespace poplar
