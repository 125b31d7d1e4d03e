#include "planner/formats/token_file.h"

#include "planner/base/input_error.h"

namespace poplar {

std::vector<std::uint16_t> ParseTokenFile(const std::string& bytes, const std::string& path, int block_size,
                                          int vocab_size) {
  if (bytes.size() % 2 != 0) {
    throw InputError(
        path, "", "is not a uint16 token file: it has an odd number of bytes (" + std::to_string(bytes.size()) + ")");
  }
  std::vector<std::uint16_t> tokens(bytes.size() / 2);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[2 * i]) |
                                           (static_cast<unsigned char>(bytes[2 * i + 1]) << 8));
    if (tokens[i] >= vocab_size) {
      throw InputError(
          path, "token " + std::to_string(i),
          "id " + std::to_string(tokens[i]) + " is outside the model's vocabulary of " + std::to_string(vocab_size));
    }
  }
  if (tokens.size() < static_cast<std::size_t>(block_size) + 1) {
    throw InputError(path, "",
                     "has " + std::to_string(tokens.size()) +
                         " tokens; one sample needs block_size + 1 = " + std::to_string(block_size + 1));
  }
  return tokens;
}

}  // namespace poplar
