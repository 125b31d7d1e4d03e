// Running poplar-worker jobs for end-to-end tests: every rank a real process on
// loopback with torchrun's environment, inputs written to a scratch folder.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "child_process.h"
#include "launcher/model/state_dict.h"
#include "test_support.h"

namespace poplar::testing {

// A GPT of byte vocabulary, by default tiny (2 layers, 2 heads, 32 wide, 16 tokens per
// sample).
std::string WriteModelConfig(const ScratchDir& scratch, int n_embd = 32, int block_size = 16, int n_layer = 2,
                             int n_head = 2);

// A Llama of byte vocabulary, as tiny, with grouped-query heads (4 heads, 2 key/value
// heads of 8) and its own output head.
std::string WriteLlamaConfig(const ScratchDir& scratch);

// `count` tokens of a deterministic, learnable byte sequence (a repeated sentence with
// a counter), written as uint16 into scratch/`file`.
std::string WriteTokens(const ScratchDir& scratch, int count, const std::string& file = "tokens.bin",
                        const std::string& sentence = "the quick brown fox jumps over the lazy dog");

// A plan file for the worker: stage, each rank's micro-batches and, when given, each
// rank's state_share.
std::string WritePlan(const ScratchDir& scratch, const std::string& name, int stage,
                      const std::vector<std::vector<int>>& micro_batches, const std::vector<double>& state_shares = {});

// `train --plan plan` for `steps` steps on the scratch folder's model.json and tokens.bin
// (WriteModelConfig, WriteTokens), without progress lines, then `extra`.
std::vector<std::string> TrainCommand(const ScratchDir& scratch, const std::string& plan, int steps,
                                      const std::vector<std::string>& extra = {});

struct JobOutcome {
  std::vector<int> exit_codes;      // per rank; -1: killed at the deadline
  std::vector<std::string> errors;  // per rank stderr

  bool AllSucceeded() const;
  std::string Describe() const;
};

// Starts one `poplar-worker args_per_rank[r]...` per rank with torchrun's environment
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), working in the scratch
// folder, stderr to scratch/rank<r>.err. Returns at once.
std::vector<std::unique_ptr<ChildProcess>> StartJob(const ScratchDir& scratch,
                                                    const std::vector<std::vector<std::string>>& args_per_rank);

// StartJob with the same `args` on `world_size` ranks; waits for all up to `deadline`.
JobOutcome RunJob(const ScratchDir& scratch, int world_size, const std::vector<std::string>& args,
                  std::chrono::seconds deadline = std::chrono::seconds(180));
// The same with each rank's own arguments.
JobOutcome RunJob(const ScratchDir& scratch, const std::vector<std::vector<std::string>>& args_per_rank,
                  std::chrono::seconds deadline = std::chrono::seconds(180));

// `path`, a state dict file, with its data record `record` (a name such as "data/0") cut
// to `keep` bytes, as a torn copy leaves it: the archive still opens, and the pickle
// still declares the whole tensor.
void TruncateDataRecord(const std::string& path, const std::string& record, std::size_t keep);

// Largest |a - b| over every tensor of two state dicts with the same keys and shapes
// (infinity if they differ in keys or shapes).
double MaxAbsDifference(const StateDict& a, const StateDict& b);

}  // namespace poplar::testing
