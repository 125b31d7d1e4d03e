// Token files (planner/formats/token_file.h): headerless uint16 (nanoGPT's .bin) and the
// header's uint16 and uint32, and every refusal naming the file and the byte offset.
#include "planner/formats/token_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using ::poplar::testing::ContainsAll;

const std::string kFile = "data/tokens.bin";

std::string Header(std::uint32_t version, std::uint32_t width) {
  std::string header(kTokenFileMagic);
  AppendToken(header, version, 32);
  AppendToken(header, width, 32);
  return header;
}

std::string Uint16(const std::vector<std::uint32_t>& ids) {
  std::string bytes;
  for (std::uint32_t id : ids) AppendToken(bytes, id, 16);
  return bytes;
}

std::string Uint32(const std::vector<std::uint32_t>& ids) {
  std::string bytes = TokenFileHeader(32);
  for (std::uint32_t id : ids) AppendToken(bytes, id, 32);
  return bytes;
}

std::vector<std::uint32_t> Ids(const TokenIds& ids) {
  std::vector<std::uint32_t> all;
  for (std::size_t i = 0; i < ids.size(); ++i) all.push_back(ids[i]);
  return all;
}

// The InputError ParseTokenFile throws for `bytes`; fails the test if none.
InputError ParseError(const std::string& bytes, int block_size = 2, int vocab_size = 1 << 24) {
  try {
    ParseTokenFile(bytes, kFile, block_size, vocab_size);
    ADD_FAILURE() << "parsed without error: " << bytes.size() << " bytes";
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

TEST(TokenFile, AHeaderlessFileIsLittleEndianUint16BitForBit) {
  const std::string bytes("A\0b\0\xff\0\x01\x02\xff\xff", 10);
  const TokenIds ids = ParseTokenFile(bytes, kFile, 4, 65536);
  EXPECT_EQ(ids.width, 16);
  EXPECT_TRUE(ids.wide.empty());
  EXPECT_EQ(ids.narrow, (std::vector<std::uint16_t>{'A', 'b', 255, 0x0201, 0xffff}));
}

TEST(TokenFile, AHeaderGivesTheWidthAndUint32IdsAreHeldAsSuch) {
  const std::vector<std::uint32_t> ids = {0, 65535, 65536, 70000, (1u << 24) - 1};
  const TokenIds wide = ParseTokenFile(Uint32(ids), kFile, 4, 1 << 24);
  EXPECT_EQ(wide.width, 32);
  EXPECT_TRUE(wide.narrow.empty());
  EXPECT_EQ(wide.wide, ids);
  // A header may say 16 bits as well: the same ids as the headerless file.
  const TokenIds narrow = ParseTokenFile(Header(1, 16) + Uint16({7, 8, 9}), kFile, 2, 10);
  EXPECT_EQ(narrow.width, 16);
  EXPECT_EQ(Ids(narrow), (std::vector<std::uint32_t>{7, 8, 9}));
}

TEST(TokenFile, TheHeaderIsSixteenBytesAsDocumented) {
  EXPECT_EQ(TokenFileHeader(16), "");
  EXPECT_EQ(TokenFileHeader(32), std::string("POPLARTK\x01\0\0\0\x20\0\0\0", 16));
  EXPECT_THROW(TokenFileHeader(8), std::invalid_argument);
  std::string bytes;
  EXPECT_THROW(AppendToken(bytes, 65536, 16), std::invalid_argument);
  AppendToken(bytes, 0x01020304, 32);
  EXPECT_EQ(bytes, "\x04\x03\x02\x01");
}

// A headerless file that happens to begin with part of the magic is uint16 tokens.
TEST(TokenFile, AFileShorterThanTheMagicIsHeaderless) {
  EXPECT_EQ(Ids(ParseTokenFile("POPLAR", kFile, 2, 1 << 16)),
            (std::vector<std::uint32_t>{'P' | 'O' << 8, 'P' | 'L' << 8, 'A' | 'R' << 8}));
}

TEST(TokenFile, AHeaderCutShortIsRefusedAtItsEnd) {
  for (std::size_t size : {8, 12, 15}) {
    const InputError error = ParseError(Header(1, 32).substr(0, size));
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), "byte " + std::to_string(size) + " (header)");
    EXPECT_TRUE(ContainsAll(error.reason(), {"ends inside the 16-byte header"})) << error.reason();
  }
}

TEST(TokenFile, AnotherVersionOrWidthIsRefusedNamingItsByte) {
  const InputError version = ParseError(Header(2, 32) + Uint16({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(version.key(), "byte 8 (header version)");
  EXPECT_TRUE(ContainsAll(version.reason(), {"is 2", "version 1"})) << version.reason();
  for (std::uint32_t width : {0u, 8u, 24u, 64u, 0xffffffffu}) {
    const InputError error = ParseError(Header(1, width) + Uint16({1, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(error.key(), "byte 12 (header token width)");
    EXPECT_TRUE(ContainsAll(error.reason(), {"is " + std::to_string(width) + " bits", "16 or 32"})) << error.reason();
  }
}

TEST(TokenFile, AFileEndingInsideATokenIsRefusedBeforeAnyId) {
  // The existing message for a headerless file: an odd number of bytes (its ids would
  // be out of a byte vocabulary, but the size is checked first).
  const InputError odd = ParseError("abc", 1, 256);
  EXPECT_EQ(odd.file(), kFile);
  EXPECT_EQ(odd.key(), "byte 2");
  EXPECT_TRUE(ContainsAll(odd.reason(), {"ends inside a token", "odd number of bytes (3)"})) << odd.reason();
  for (std::size_t extra : {1, 2, 3}) {
    const InputError error = ParseError(Uint32({1, 2, 3}) + std::string(extra, '\xff'));
    EXPECT_EQ(error.key(), "byte 28");
    EXPECT_TRUE(ContainsAll(error.reason(),
                            {"ends inside a token", std::to_string(12 + extra) + " bytes after the header", "uint32"}))
        << error.reason();
  }
  const InputError narrow = ParseError(Header(1, 16) + Uint16({1, 2, 3}) + "x");
  EXPECT_EQ(narrow.key(), "byte 22");
  EXPECT_TRUE(ContainsAll(narrow.reason(), {"7 bytes after the header", "uint16"})) << narrow.reason();
}

TEST(TokenFile, AnIdOutsideTheVocabularyIsNamedByIndexAndByte) {
  const InputError narrow = ParseError(Uint16({1, 2, 256, 3}), 2, 256);
  EXPECT_EQ(narrow.file(), kFile);
  EXPECT_EQ(narrow.key(), "token 2 (byte 4)");
  EXPECT_TRUE(ContainsAll(narrow.reason(), {"id 256", "vocabulary of 256"})) << narrow.reason();
  const InputError wide = ParseError(Uint32({5, 69999, 70000, 1}), 2, 70000);
  EXPECT_EQ(wide.key(), "token 2 (byte 24)");
  EXPECT_TRUE(ContainsAll(wide.reason(), {"id 70000", "vocabulary of 70000"})) << wide.reason();
  EXPECT_TRUE(ContainsAll(ParseError(Uint32({0, 0xffffffffu, 0}), 1).reason(), {"id 4294967295"}));
  EXPECT_EQ(Ids(ParseTokenFile(Uint32({69999, 0, 1}), kFile, 2, 70000)), (std::vector<std::uint32_t>{69999, 0, 1}));
}

TEST(TokenFile, OneSampleNeedsBlockSizePlusOneTokens) {
  for (const std::string& bytes : {Uint16({1, 2, 3}), Uint32({1, 2, 3}), std::string(), TokenFileHeader(32)}) {
    const InputError error = ParseError(bytes, 3);
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), "");
    EXPECT_TRUE(ContainsAll(error.reason(), {"tokens; one sample needs block_size + 1 = 4"})) << error.reason();
  }
  EXPECT_EQ(ParseTokenFile(Uint32({1, 2, 3, 4}), kFile, 3, 5).size(), 4u);
}

// ReadTokenFile reads a file in pieces: the same ids and the same refusals as
// ParseTokenFile of its bytes, whatever the piece a token or the header straddles.
TEST(TokenFile, ReadingAFileGivesWhatParsingItsBytesGives) {
  ::poplar::testing::ScratchDir scratch("token_file");
  std::vector<std::uint32_t> ids;
  for (std::uint32_t i = 0; i < 700'001; ++i) ids.push_back(i * 2654435761u % 70000);
  const TokenIds wide = ReadTokenFile(scratch.Write("wide.bin", Uint32(ids)), 16, 70000);
  EXPECT_EQ(wide.width, 32);
  EXPECT_EQ(wide.wide, ids);
  for (std::uint32_t& id : ids) id %= 65536;
  const TokenIds narrow = ReadTokenFile(scratch.Write("narrow.bin", Uint16(ids)), 16, 65536);
  EXPECT_EQ(narrow.width, 16);
  EXPECT_EQ(Ids(narrow), ids);
  const std::string odd = scratch.Write("odd.bin", Uint32(ids) + "x");
  const std::string message = ::poplar::testing::ErrorOf([&] { ReadTokenFile(odd, 16, 1 << 24); });
  EXPECT_TRUE(ContainsAll(message, {odd, "byte 2800020", "ends inside a token"})) << message;
  const std::string folder = ::poplar::testing::ErrorOf([&] { ReadTokenFile(scratch.path(), 16, 256); });
  EXPECT_TRUE(ContainsAll(folder, {"is a folder"})) << folder;
  const std::string missing = ::poplar::testing::ErrorOf([&] { ReadTokenFile(scratch.path() + "/no.bin", 16, 256); });
  EXPECT_TRUE(ContainsAll(missing, {"no.bin", "cannot read"})) << missing;
}

// A pipe's size is not known: a token cut at its end is found there, after the ids.
TEST(TokenFile, APipeIsReadToItsEnd) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  const std::string bytes = Uint32({1, 2, 3, 4}) + "xy";
  ASSERT_EQ(::write(ends[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(ends[1]);  // the pipe holds the bytes, then ends
  const std::string pipe = "/proc/self/fd/" + std::to_string(ends[0]);
  const std::string message = ::poplar::testing::ErrorOf([&] { ReadTokenFile(pipe, 3, 5); });
  ::close(ends[0]);
  EXPECT_TRUE(ContainsAll(message, {"byte 32", "ends inside a token", "uint32"})) << message;
}

}  // namespace
}  // namespace poplar
