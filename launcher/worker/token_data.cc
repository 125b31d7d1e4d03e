#include "launcher/worker/token_data.h"

namespace poplar {
namespace {

template <typename Id>
std::uint64_t Fingerprint(const std::vector<Id>& ids) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a offset basis and prime
  for (const Id id : ids) hash = (hash ^ id) * 1099511628211ull;
  return hash;
}

// Sample `sample`'s inputs and targets into x and y (block_size each).
template <typename Id>
void CopySample(const std::vector<Id>& ids, std::int64_t sample, int block_size, std::int64_t* x, std::int64_t* y) {
  const Id* window = ids.data() + sample * block_size;
  for (int t = 0; t < block_size; ++t) {
    x[t] = window[t];
    y[t] = window[t + 1];
  }
}

}  // namespace

TokenData::TokenData(const std::string& path, int block_size, int vocab_size) : block_size_(block_size) {
  tokens_ = ReadTokenFile(path, block_size, vocab_size);
  samples_ = static_cast<std::int64_t>(tokens_.size() - 1) / block_size;
  fingerprint_ = tokens_.width == 16 ? Fingerprint(tokens_.narrow) : Fingerprint(tokens_.wide);
}

std::pair<torch::Tensor, torch::Tensor> TokenData::Batch(std::int64_t first, int count) const {
  auto inputs = torch::empty({count, block_size_}, torch::kLong);
  auto targets = torch::empty({count, block_size_}, torch::kLong);
  auto* x = inputs.data_ptr<std::int64_t>();
  auto* y = targets.data_ptr<std::int64_t>();
  for (int i = 0; i < count; ++i) {
    const std::int64_t sample = (first + i) % samples_;
    std::int64_t* const xi = x + static_cast<std::int64_t>(i) * block_size_;
    std::int64_t* const yi = y + static_cast<std::int64_t>(i) * block_size_;
    if (tokens_.width == 16) {
      CopySample(tokens_.narrow, sample, block_size_, xi, yi);
    } else {
      CopySample(tokens_.wide, sample, block_size_, xi, yi);
    }
  }
  return {inputs, targets};
}

}  // namespace poplar
