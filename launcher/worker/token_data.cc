#include "launcher/worker/token_data.h"

#include "planner/base/text_file.h"
#include "planner/formats/token_file.h"

namespace poplar {

TokenData::TokenData(const std::string& path, int block_size, int vocab_size) : block_size_(block_size) {
  tokens_ = ParseTokenFile(ReadTextFile(path), path, block_size, vocab_size);
  samples_ = static_cast<std::int64_t>(tokens_.size() - 1) / block_size;
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a offset basis and prime
  for (const std::uint16_t token : tokens_) hash = (hash ^ token) * 1099511628211ull;
  fingerprint_ = hash;
}

std::pair<torch::Tensor, torch::Tensor> TokenData::Batch(std::int64_t first, int count) const {
  auto inputs = torch::empty({count, block_size_}, torch::kLong);
  auto targets = torch::empty({count, block_size_}, torch::kLong);
  auto* x = inputs.data_ptr<std::int64_t>();
  auto* y = targets.data_ptr<std::int64_t>();
  for (int i = 0; i < count; ++i) {
    const std::int64_t sample = (first + i) % samples_;
    const std::uint16_t* window = tokens_.data() + sample * block_size_;
    for (int t = 0; t < block_size_; ++t) {
      x[i * block_size_ + t] = window[t];
      y[i * block_size_ + t] = window[t + 1];
    }
  }
  return {inputs, targets};
}

}  // namespace poplar
