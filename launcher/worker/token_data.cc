#include "launcher/worker/token_data.h"

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {

TokenData::TokenData(const std::string& path, int block_size, int vocab_size) : block_size_(block_size) {
  const std::string bytes = ReadTextFile(path);
  if (bytes.size() % 2 != 0) {
    throw InputError(
        path, "", "is not a uint16 token file: it has an odd number of bytes (" + std::to_string(bytes.size()) + ")");
  }
  tokens_.resize(bytes.size() / 2);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    tokens_[i] = static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[2 * i]) |
                                            (static_cast<unsigned char>(bytes[2 * i + 1]) << 8));
    if (tokens_[i] >= vocab_size) {
      throw InputError(
          path, "token " + std::to_string(i),
          "id " + std::to_string(tokens_[i]) + " is outside the model's vocabulary of " + std::to_string(vocab_size));
    }
  }
  if (tokens_.size() < static_cast<std::size_t>(block_size) + 1) {
    throw InputError(path, "",
                     "has " + std::to_string(tokens_.size()) +
                         " tokens; one sample needs block_size + 1 = " + std::to_string(block_size + 1));
  }
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
