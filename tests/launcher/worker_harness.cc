#include "worker_harness.h"

#include <caffe2/serialize/inline_container.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "planner/base/free_port.h"

namespace poplar::testing {

std::string WriteModelConfig(const ScratchDir& scratch, int n_embd, int block_size, int n_layer, int n_head) {
  return scratch.Write("model.json", nlohmann::json{{"arch", "gpt"},
                                                    {"n_layer", n_layer},
                                                    {"n_head", n_head},
                                                    {"n_embd", n_embd},
                                                    {"vocab_size", 256},
                                                    {"block_size", block_size}}
                                         .dump());
}

std::string WriteLlamaConfig(const ScratchDir& scratch) {
  return scratch.Write("model.json", nlohmann::json{{"arch", "llama"},
                                                    {"n_layer", 2},
                                                    {"n_head", 4},
                                                    {"n_kv_head", 2},
                                                    {"n_embd", 32},
                                                    {"vocab_size", 256},
                                                    {"block_size", 16}}
                                         .dump());
}

std::string WriteTokens(const ScratchDir& scratch, int count, const std::string& file, const std::string& sentence) {
  std::string text;
  for (int line = 0; static_cast<int>(text.size()) < count; ++line) {
    text += sentence + " " + std::to_string(line % 97) + ".\n";
  }
  text.resize(count);
  std::string bytes;
  for (unsigned char c : text) {
    bytes.push_back(static_cast<char>(c));
    bytes.push_back('\0');
  }
  return scratch.Write(file, bytes);
}

std::string WritePlan(const ScratchDir& scratch, const std::string& name, int stage,
                      const std::vector<std::vector<int>>& micro_batches, const std::vector<double>& state_shares) {
  nlohmann::json ranks = nlohmann::json::array();
  int total = 0;
  for (std::size_t r = 0; r < micro_batches.size(); ++r) {
    ranks.push_back({{"rank", r}, {"micro_batches", micro_batches[r]}});
    if (!state_shares.empty()) ranks.back()["state_share"] = state_shares.at(r);
    for (int b : micro_batches[r]) total += b;
  }
  return scratch.Write(name, nlohmann::json{{"stage", stage}, {"global_batch", total}, {"ranks", ranks}}.dump());
}

std::vector<std::string> TrainCommand(const ScratchDir& scratch, const std::string& plan, int steps,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"train",
                                   "--plan",
                                   plan,
                                   "--model-config",
                                   scratch.path() + "/model.json",
                                   "--data",
                                   scratch.path() + "/tokens.bin",
                                   "--steps",
                                   std::to_string(steps),
                                   "--log-every",
                                   "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

bool JobOutcome::AllSucceeded() const {
  for (int code : exit_codes) {
    if (code != 0) return false;
  }
  return !exit_codes.empty();
}

std::string JobOutcome::Describe() const {
  std::string text;
  for (std::size_t r = 0; r < exit_codes.size(); ++r) {
    text += "rank " + std::to_string(r) + " exit " + std::to_string(exit_codes[r]) + ": " + errors[r] + "\n";
  }
  return text;
}

std::vector<std::unique_ptr<ChildProcess>> StartJob(const ScratchDir& scratch,
                                                    const std::vector<std::vector<std::string>>& args_per_rank) {
  const int port = poplar::FindFreePort();
  const int world_size = static_cast<int>(args_per_rank.size());
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < world_size; ++r) {
    ChildOptions options;
    options.argv = {POPLAR_WORKER_BINARY};
    options.argv.insert(options.argv.end(), args_per_rank[r].begin(), args_per_rank[r].end());
    options.env = {{"RANK", std::to_string(r)},           {"WORLD_SIZE", std::to_string(world_size)},
                   {"LOCAL_RANK", std::to_string(r)},     {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)}, {"OMP_NUM_THREADS", "1"}};
    options.cwd = scratch.path();
    options.stderr_path = scratch.path() + "/rank" + std::to_string(r) + ".err";
    ranks.push_back(std::make_unique<ChildProcess>(options));
  }
  return ranks;
}

JobOutcome RunJob(const ScratchDir& scratch, int world_size, const std::vector<std::string>& args,
                  std::chrono::seconds deadline) {
  return RunJob(scratch, std::vector<std::vector<std::string>>(world_size, args), deadline);
}

JobOutcome RunJob(const ScratchDir& scratch, const std::vector<std::vector<std::string>>& args_per_rank,
                  std::chrono::seconds deadline) {
  const int world_size = static_cast<int>(args_per_rank.size());
  auto ranks = StartJob(scratch, args_per_rank);
  JobOutcome outcome;
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (int r = 0; r < world_size; ++r) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    outcome.exit_codes.push_back(ranks[r]->Wait(std::max(left, std::chrono::milliseconds(1))));
    outcome.errors.push_back(ReadWholeFile(scratch.path() + "/rank" + std::to_string(r) + ".err"));
  }
  return outcome;
}

void TruncateDataRecord(const std::string& path, const std::string& record, std::size_t keep) {
  std::vector<std::pair<std::string, std::string>> records;
  {
    caffe2::serialize::PyTorchStreamReader reader(path);
    for (const std::string& name : reader.getAllRecords()) {
      if (name == "version" || name == ".data/serialization_id") continue;  // written anew at the end
      auto [data, size] = reader.getRecord(name);
      std::string bytes(static_cast<const char*>(data.get()), size);
      if (name == record) bytes.resize(std::min(keep, bytes.size()));
      records.emplace_back(name, std::move(bytes));
    }
  }
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

double MaxAbsDifference(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double largest = 0;
  for (const auto& [name, tensor] : a) {
    auto other = b.find(name);
    if (other == b.end() || other->second.sizes() != tensor.sizes()) {
      return std::numeric_limits<double>::infinity();
    }
    largest = std::max(largest, (tensor - other->second).abs().max().item<double>());
  }
  return largest;
}

}  // namespace poplar::testing
