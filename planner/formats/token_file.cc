#include "planner/formats/token_file.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

std::uint32_t LittleEndian(const char* bytes, std::size_t count) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < count; ++i) value |= std::uint32_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  return value;
}

std::string Byte(std::uint64_t offset) { return "byte " + std::to_string(offset); }

// Parses a token file piece by piece, as it is read: the header (when the file starts
// with the magic), then the ids, each checked against the vocabulary as it comes. With
// the file's size known, a file that ends inside a token is refused before any id.
class TokenFileParser {
 public:
  TokenFileParser(const std::string& path, int vocab_size, std::optional<std::uint64_t> file_size)
      : path_(path), vocab_size_(static_cast<std::uint32_t>(vocab_size)), file_size_(file_size) {}

  void Feed(std::string_view piece) {
    if (!layout_known_) {
      // At most the header's bytes wait in pending_ until the layout is known.
      const std::size_t take = std::min(piece.size(), kTokenFileHeaderBytes - pending_.size());
      pending_.append(piece.substr(0, take));
      piece.remove_prefix(take);
      if (!DecideLayout(/*at_end=*/false)) return;
      const std::string rest = pending_.substr(header_bytes_);
      pending_.clear();
      TakeTokens(rest);
    }
    TakeTokens(piece);
  }

  TokenIds Finish(int block_size) {
    if (!layout_known_) {
      DecideLayout(/*at_end=*/true);
      const std::string rest = pending_.substr(header_bytes_);
      pending_.clear();
      TakeTokens(rest);
    }
    if (!pending_.empty()) throw EndsInsideAToken(offset_ + pending_.size());
    if (ids_.size() < static_cast<std::size_t>(block_size) + 1) {
      throw InputError(path_, "",
                       "has " + std::to_string(ids_.size()) +
                           " tokens; one sample needs block_size + 1 = " + std::to_string(block_size + 1));
    }
    return std::move(ids_);
  }

 private:
  std::size_t TokenBytes() const { return static_cast<std::size_t>(ids_.width / 8); }

  // Whether the header is read (or known absent) from pending_; at the file's end, a
  // file shorter than the magic has none.
  bool DecideLayout(bool at_end) {
    if (pending_.size() < kTokenFileMagic.size() && !at_end) return false;
    if (pending_.compare(0, kTokenFileMagic.size(), kTokenFileMagic) != 0) {
      ids_.width = 16;
    } else if (pending_.size() < kTokenFileHeaderBytes) {
      if (!at_end) return false;
      throw InputError(path_, Byte(pending_.size()) + " (header)",
                       "the file ends inside the 16-byte header that \"POPLARTK\" starts");
    } else {
      ReadHeader();
    }
    layout_known_ = true;
    offset_ = header_bytes_;
    if (file_size_ && *file_size_ >= header_bytes_) {
      if ((*file_size_ - header_bytes_) % TokenBytes() != 0) throw EndsInsideAToken(*file_size_);
      const std::size_t tokens = (*file_size_ - header_bytes_) / TokenBytes();
      if (ids_.width == 16) {
        ids_.narrow.reserve(tokens);
      } else {
        ids_.wide.reserve(tokens);
      }
    }
    return true;
  }

  void ReadHeader() {
    const std::uint32_t version = LittleEndian(pending_.data() + 8, 4);
    if (version != kTokenFileVersion) {
      throw InputError(
          path_, Byte(8) + " (header version)",
          "is " + std::to_string(version) + "; this poplar reads version " + std::to_string(kTokenFileVersion));
    }
    const std::uint32_t width = LittleEndian(pending_.data() + 12, 4);
    if (width != 16 && width != 32) {
      throw InputError(path_, Byte(12) + " (header token width)",
                       "is " + std::to_string(width) + " bits; a token is 16 or 32 bits");
    }
    ids_.width = static_cast<int>(width);
    header_bytes_ = kTokenFileHeaderBytes;
  }

  InputError EndsInsideAToken(std::uint64_t size) const {
    const std::uint64_t whole = (size - header_bytes_) / TokenBytes() * TokenBytes() + header_bytes_;
    if (header_bytes_ == 0) {
      return InputError(path_, Byte(whole),
                        "the file ends inside a token: it has an odd number of bytes (" + std::to_string(size) +
                            "), not a whole number of uint16 tokens");
    }
    return InputError(path_, Byte(whole),
                      "the file ends inside a token: its " + std::to_string(size - header_bytes_) +
                          " bytes after the header are not a whole number of uint" + std::to_string(ids_.width) +
                          " tokens");
  }

  // The ids of `piece`, after the bytes of a token an earlier piece began.
  void TakeTokens(std::string_view piece) {
    const std::size_t width = TokenBytes();
    if (!pending_.empty()) {
      const std::size_t take = std::min(width - pending_.size(), piece.size());
      pending_.append(piece.substr(0, take));
      piece.remove_prefix(take);
      if (pending_.size() < width) return;
      AddTokens(pending_.data(), 1);
      pending_.clear();
    }
    const std::size_t whole = piece.size() / width;
    AddTokens(piece.data(), whole);
    pending_.assign(piece.substr(whole * width));
  }

  void AddTokens(const char* bytes, std::size_t count) {
    const std::size_t width = TokenBytes();
    for (std::size_t i = 0; i < count; ++i, bytes += width, offset_ += width) {
      const std::uint32_t id = LittleEndian(bytes, width);
      if (id >= vocab_size_) {
        throw InputError(
            path_, "token " + std::to_string(ids_.size()) + " (" + Byte(offset_) + ")",
            "id " + std::to_string(id) + " is outside the model's vocabulary of " + std::to_string(vocab_size_));
      }
      if (ids_.width == 16) {
        ids_.narrow.push_back(static_cast<std::uint16_t>(id));
      } else {
        ids_.wide.push_back(id);
      }
    }
  }

  std::string path_;
  std::uint32_t vocab_size_;
  std::optional<std::uint64_t> file_size_;
  bool layout_known_ = false;
  std::size_t header_bytes_ = 0;  // 0 (headerless) or kTokenFileHeaderBytes
  std::uint64_t offset_ = 0;      // the byte offset of the next token
  std::string pending_;           // the bytes of a header or token not yet whole
  TokenIds ids_;
};

}  // namespace

TokenIds ParseTokenFile(const std::string& bytes, const std::string& path, int block_size, int vocab_size) {
  TokenFileParser parser(path, vocab_size, bytes.size());
  parser.Feed(bytes);
  return parser.Finish(block_size);
}

TokenIds ReadTokenFile(const std::string& path, int block_size, int vocab_size) {
  std::optional<TokenFileParser> parser;
  ReadFileInPieces(
      path, [&](std::optional<std::uint64_t> size) { parser.emplace(path, vocab_size, size); },
      [&](std::string_view piece) { parser->Feed(piece); });
  return parser->Finish(block_size);
}

std::string TokenFileHeader(int width) {
  if (width == 16) return "";
  if (width != 32) throw std::invalid_argument("a token is 16 or 32 bits, not " + std::to_string(width));
  std::string header(kTokenFileMagic);
  AppendToken(header, kTokenFileVersion, 32);
  AppendToken(header, static_cast<std::uint32_t>(width), 32);
  return header;
}

void AppendToken(std::string& bytes, std::uint32_t id, int width) {
  if (width != 16 && width != 32) throw std::invalid_argument("a token is 16 or 32 bits, not " + std::to_string(width));
  if (width == 16 && id > 0xffff) throw std::invalid_argument("id " + std::to_string(id) + " does not fit 16 bits");
  for (int shift = 0; shift < width; shift += 8) bytes.push_back(static_cast<char>((id >> shift) & 0xff));
}

}  // namespace poplar
