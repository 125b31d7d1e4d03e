// A token file (`poplar prepare-data`, nanoGPT's train.bin), read as untrusted bytes;
// docs/formats.md, "Token file". Either headerless, a flat array of little-endian uint16
// token ids (nanoGPT's .bin, read bit for bit as ever), or a 16-byte header
//
//   bytes 0-7    "POPLARTK"
//   bytes 8-11   version, little-endian uint32: 1
//   bytes 12-15  token width in bits, little-endian uint32: 16 or 32
//
// then the ids at that width, little-endian. The ids are held at the file's width: a
// uint16 file costs 2 bytes a token in memory, a uint32 file 4. The worker cuts them
// into samples (launcher/worker/token_data.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace poplar {

inline constexpr std::string_view kTokenFileMagic = "POPLARTK";
inline constexpr std::size_t kTokenFileHeaderBytes = 16;
inline constexpr std::uint32_t kTokenFileVersion = 1;

// The token ids of a file, at its width: `narrow` for 16 bits, `wide` for 32 (the other
// one empty).
struct TokenIds {
  int width = 16;
  std::vector<std::uint16_t> narrow;
  std::vector<std::uint32_t> wide;

  std::size_t size() const { return width == 16 ? narrow.size() : wide.size(); }
  std::uint32_t operator[](std::size_t i) const { return width == 16 ? narrow[i] : wide[i]; }
};

// The token ids of `bytes`, the contents of `path` (named in errors). Throws InputError
// naming the byte offset for a bad header (cut short, another version or width), a file
// that ends inside a token, or an id >= vocab_size; and for fewer than block_size + 1
// tokens (one sample's input and target).
TokenIds ParseTokenFile(const std::string& bytes, const std::string& path, int block_size, int vocab_size);

// The token ids of the file `path`, as ParseTokenFile, read in pieces into the ids'
// storage (never the whole file at once besides them). Throws InputError for an
// unreadable file (a folder, a device) and what ParseTokenFile refuses.
TokenIds ReadTokenFile(const std::string& path, int block_size, int vocab_size);

// The header of a token file of `width` bits (16 or 32): none for 16, nanoGPT's .bin
// as ever; the 16 bytes above for 32. Throws std::invalid_argument for another width.
std::string TokenFileHeader(int width);
// Appends `id` to a token file's `bytes` as `width` bits, little-endian. Throws
// std::invalid_argument for an id that does not fit.
void AppendToken(std::string& bytes, std::uint32_t id, int width);

}  // namespace poplar
