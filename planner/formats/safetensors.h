// Hugging Face's checkpoint files, read as untrusted input (docs/formats.md,
// "Safetensors and Hugging Face folders"):
//
// - a .safetensors file (https://github.com/huggingface/safetensors): 8 bytes, the
//   little-endian length N of the header; N bytes of a UTF-8 JSON object, maybe padded
//   with spaces, naming each tensor's dtype, shape and data_offsets [begin, end) in the
//   data region that follows (the bytes after the header, to the file's end), with an
//   optional "__metadata__" object of strings; then the data region, every byte of it
//   some tensor's;
// - model.safetensors.index.json, a sharded model's map of tensor name -> shard file.
//
// Every check that reads an untrusted file is here, without torch, so that the fuzz
// target (tests/fuzz/safetensors_header_fuzzer.cc) covers it; launcher/model/
// safetensors_file.h reads and writes the tensors' bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace poplar {

// The length of the prefix that holds the header's length N.
constexpr std::uint64_t kSafetensorsPrefixSize = 8;
// The largest header read, as the safetensors library refuses larger ones: a crafted
// N must not make a reader allocate gigabytes.
constexpr std::uint64_t kSafetensorsMaxHeaderSize = 100'000'000;

// The element types whose elements are whole bytes; the spec's sub-byte types (F4,
// F6_E2M3, ...) are refused as unknown.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64
};

// The spec's name ("BF16").
const char* SafetensorsDtypeName(SafetensorsDtype dtype);
// Bytes per element: 1, 2, 4 or 8.
int SafetensorsDtypeSize(SafetensorsDtype dtype);
// The dtype the spec's name stands for; nullopt for any other text.
std::optional<SafetensorsDtype> SafetensorsDtypeFromName(const std::string& name);

// A tensor as a header describes it.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<std::int64_t> shape;  // each size >= 0; {} for a scalar
};

// A tensor of a parsed file and where its bytes lie in it.
struct SafetensorsEntry : SafetensorsTensor {
  std::uint64_t offset = 0;  // from the file's start: 8 + N + begin
  std::uint64_t length = 0;  // bytes: elements * SafetensorsDtypeSize(dtype)
};

struct SafetensorsHeader {
  std::uint64_t header_size = 0;                // N
  std::vector<SafetensorsEntry> entries;        // in the order of their bytes in the file
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// The header's length N from `prefix`, the first kSafetensorsPrefixSize bytes of the
// file `path` (fewer when the file is shorter) of `file_size` bytes. Throws InputError
// naming `path`: a file shorter than the prefix, or N larger than the rest of the file
// or than kSafetensorsMaxHeaderSize. A reader reads the prefix, then the N bytes after
// it for ParseSafetensorsHeader, and each tensor's bytes where its entry says: never
// the whole file.
std::uint64_t SafetensorsHeaderSize(const std::string& prefix, std::uint64_t file_size, const std::string& path);

// The tensors and metadata of the header `header` (the N bytes after the prefix) of the
// file `path` of `file_size` bytes. Throws InputError naming `path`, the tensor (or
// "__metadata__") and the reason: not a JSON object (or a key twice), an entry not an
// object or with a key other than dtype, shape and data_offsets, an unknown dtype, a
// shape not a list of integers >= 0, data_offsets not two integers with begin <= end,
// a byte length other than elements * element size (or one that overflows), bytes
// beyond the data region, two tensors' bytes overlapping, or data-region bytes that no
// tensor holds (the spec allows no holes); metadata not an object of strings.
SafetensorsHeader ParseSafetensorsHeader(const std::string& header, std::uint64_t file_size, const std::string& path);

// The prefix and header (8 + N bytes) of a file holding `tensors`, their bytes
// contiguous in this order from the data region's start, and `metadata` ("__metadata__",
// left out when empty); the header is padded with spaces to a multiple of 8 bytes, so
// that every tensor's bytes are aligned as their dtype needs. Throws
// std::invalid_argument for names a file cannot hold: empty, "__metadata__", given
// twice, not UTF-8; and for a size < 0 or bytes beyond 64 bits.
std::string SafetensorsHeaderBytes(const std::vector<SafetensorsTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata);

// The weight_map of model.safetensors.index.json text `text` (file `path`): tensor name
// -> shard file name, a plain name in the index's folder (not empty, no '/', not "."
// or ".."). "metadata" is optional and may hold anything; any other key is an error.
// Throws InputError naming `path`, the key (weight_map.NAME) and the reason.
std::map<std::string, std::string> ParseSafetensorsIndex(const std::string& text, const std::string& path);

}  // namespace poplar
