// A token file (`poplar prepare-data`, nanoGPT's train.bin): flat little-endian uint16
// token ids, read as untrusted bytes. The worker cuts it into samples (TokenData).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace poplar {

// The token ids of `bytes`, the contents of `path` (named in errors). Throws InputError
// for an odd byte count, a token id >= vocab_size (naming its position), or fewer than
// block_size + 1 tokens (one sample's input and target).
std::vector<std::uint16_t> ParseTokenFile(const std::string& bytes, const std::string& path, int block_size,
                                          int vocab_size);

}  // namespace poplar
