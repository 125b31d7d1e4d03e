// TokenData: a token file (planner/formats/token_file.h: nanoGPT's flat little-endian
// uint16, or uint32 after a header) cut into samples, its ids held at the file's width.
//
// Sample k is tokens[k*L, k*L+L) as input and the same window shifted by one as target
// (L = block size); there are S = (tokens - 1) / L samples. Global batch t of B samples
// is samples (t*B + i) mod S for i = 0..B-1 (docs/worker.md, training semantics).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "planner/formats/token_file.h"

namespace poplar {

class TokenData {
 public:
  // Reads the whole file (ReadTokenFile). Throws InputError for an unreadable file or
  // one ReadTokenFile refuses.
  TokenData(const std::string& path, int block_size, int vocab_size);

  std::int64_t samples() const { return samples_; }
  std::int64_t tokens() const { return static_cast<std::int64_t>(tokens_.size()); }
  // FNV-1a (64 bits) of the token ids in order, each id one step whatever the file's
  // width: the ranks of a job compare it, since every rank must cut the same global
  // samples from the same text.
  std::uint64_t fingerprint() const { return fingerprint_; }

  // Inputs and targets [count, L] (int64) of global samples first, first+1, ... (mod S).
  std::pair<torch::Tensor, torch::Tensor> Batch(std::int64_t first, int count) const;

 private:
  TokenIds tokens_;
  int block_size_;
  std::int64_t samples_;
  std::uint64_t fingerprint_ = 0;
};

}  // namespace poplar
