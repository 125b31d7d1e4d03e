// `poplar prepare-data --tokenizer` with SentencePiece models trained here, by the
// sentencepiece library's own trainer, on generated text (no file from outside the
// repository): the ids the library's processor gives, at the width the vocabulary
// needs (planner/formats/token_file.h), and a refusal of what is not a model.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "child_process.h"
#include "planner/formats/token_file.h"
#include "test_support.h"

namespace poplar::testing {
namespace {

// Lines of made-up sentences over a small vocabulary of words, with a counter.
std::string GeneratedText(int lines) {
  const std::vector<std::string> words = {"the",  "quick", "brown",  "fox",  "jumps", "over",  "lazy",
                                          "dog",  "a",     "stitch", "in",   "time",  "saves", "nine",
                                          "said", "one",   "of",     "them", "river", "stone", "bright"};
  std::string text;
  for (int line = 0; line < lines; ++line) {
    for (int w = 0; w < 7; ++w) text += words[(line * 7 + w * w + line / 3) % words.size()] + " ";
    text += std::to_string(line % 50) + ".\n";
  }
  return text;
}

// A protocol-buffer length (a varint).
void AppendVarint(std::string& bytes, std::size_t value) {
  for (; value >= 0x80; value >>= 7) bytes.push_back(static_cast<char>((value & 0x7f) | 0x80));
  bytes.push_back(static_cast<char>(value));
}

// `model`, a serialized ModelProto, with `extra` more pieces "zq<i>" of score -1 (field
// 1, repeated: appending its records appends pieces), so that its vocabulary passes
// 65,536 without training one that large.
std::string WithMorePieces(std::string model, int extra) {
  for (int i = 0; i < extra; ++i) {
    const std::string text = "zq" + std::to_string(i);
    std::string piece;
    piece.push_back('\x0a');  // piece: string, field 1
    AppendVarint(piece, text.size());
    piece += text;
    piece.push_back('\x15');  // score: float, field 2
    const float score = -1.0f;
    char score_bytes[4];
    std::memcpy(score_bytes, &score, 4);
    piece.append(score_bytes, 4);
    model.push_back('\x0a');  // pieces: field 1 of ModelProto
    AppendVarint(model, piece.size());
    model += piece;
  }
  return model;
}

class PrepareData : public ::testing::Test {
 protected:
  void SetUp() override {
    text_ = scratch_.Write("text.txt", GeneratedText(400));
    // A unigram model of 50 pieces, trained from the text's file.
    std::string model;
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        {{"input", text_}, {"model_type", "unigram"}, {"vocab_size", "50"}, {"num_threads", "1"}}, nullptr, &model);
    ASSERT_TRUE(status.ok()) << status.ToString();
    model_ = scratch_.Write("tiny.model", model);
  }

  ProcessOutcome Poplar(const std::vector<std::string>& args) {
    ChildOptions options;
    options.argv = {POPLAR_BINARY};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.cwd = scratch_.path();
    std::filesystem::create_directories(scratch_.path() + "/io");
    return RunProcess(options, scratch_.path() + "/io");
  }

  // The ids the library gives for the text file, line by line, as prepare-data encodes.
  std::vector<std::uint32_t> ExpectedIds(const std::string& model_path) {
    sentencepiece::SentencePieceProcessor processor;
    EXPECT_TRUE(processor.Load(model_path).ok());
    const std::string text = ReadWholeFile(text_);
    std::vector<std::uint32_t> ids;
    for (std::size_t begin = 0; begin < text.size();) {
      const std::size_t end = text.find('\n', begin) + 1;
      std::vector<int> line;
      EXPECT_TRUE(processor.Encode(text.substr(begin, end - begin), &line).ok());
      ids.insert(ids.end(), line.begin(), line.end());
      begin = end;
    }
    return ids;
  }

  static std::vector<std::uint32_t> Ids(const TokenIds& tokens) {
    std::vector<std::uint32_t> ids;
    for (std::size_t i = 0; i < tokens.size(); ++i) ids.push_back(tokens[i]);
    return ids;
  }

  ScratchDir scratch_{"poplar_prepare_data"};
  std::string text_;
  std::string model_;
};

TEST_F(PrepareData, ASmallVocabularyIsWrittenAsHeaderlessUint16) {
  const ProcessOutcome run = Poplar({"prepare-data", text_, "-o", "tokens.bin", "--tokenizer", model_});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"vocabulary 50", "uint16", "\"vocab_size\": 50"})) << run.out;
  const std::string bytes = ReadWholeFile(scratch_.path() + "/tokens.bin");
  EXPECT_NE(bytes.substr(0, 8), "POPLARTK");
  const TokenIds tokens = ParseTokenFile(bytes, "tokens.bin", 1, 50);
  EXPECT_EQ(tokens.width, 16);
  const std::vector<std::uint32_t> expected = ExpectedIds(model_);
  EXPECT_GT(expected.size(), 1000u);
  EXPECT_EQ(Ids(tokens), expected);
  EXPECT_TRUE(Contains(run.out, "wrote " + std::to_string(expected.size()) + " tokens")) << run.out;

  const ProcessOutcome wide =
      Poplar({"prepare-data", text_, "-o", "wide.bin", "--tokenizer", model_, "--token-width", "32"});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  const TokenIds wide_tokens = ParseTokenFile(ReadWholeFile(scratch_.path() + "/wide.bin"), "wide.bin", 1, 50);
  EXPECT_EQ(wide_tokens.width, 32);
  EXPECT_EQ(Ids(wide_tokens), expected);
}

TEST_F(PrepareData, AVocabularyPastUint16IsWrittenAsUint32) {
  const std::string large = scratch_.Write("large.model", WithMorePieces(ReadWholeFile(model_), 70000));
  scratch_.Write("text.txt", ReadWholeFile(text_) + "zq69999 zq123 fox\n");
  const ProcessOutcome run = Poplar({"prepare-data", text_, "-o", "tokens.bin", "--tokenizer", large});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(ContainsAll(run.out, {"vocabulary 70050", "uint32", "\"vocab_size\": 70050"})) << run.out;
  const TokenIds tokens = ParseTokenFile(ReadWholeFile(scratch_.path() + "/tokens.bin"), "tokens.bin", 1, 70050);
  EXPECT_EQ(tokens.width, 32);
  const std::vector<std::uint32_t> expected = ExpectedIds(large);
  EXPECT_EQ(Ids(tokens), expected);
  EXPECT_GE(*std::max_element(expected.begin(), expected.end()), 65536u) << "an id past uint16 is in the file";

  // 16 bits cannot hold them: refused, naming the flag, and nothing written.
  const ProcessOutcome narrow =
      Poplar({"prepare-data", text_, "-o", "narrow.bin", "--tokenizer", large, "--token-width", "16"});
  EXPECT_EQ(narrow.exit_code, 1);
  EXPECT_TRUE(IsOneLine(narrow.err)) << narrow.err;
  EXPECT_TRUE(ContainsAll(narrow.err, {"--token-width", "70050"})) << narrow.err;
  EXPECT_FALSE(std::filesystem::exists(scratch_.path() + "/narrow.bin"));
}

TEST_F(PrepareData, WhatIsNotAModelIsRefusedNamingItAndNothingIsWritten) {
  const std::string truncated = scratch_.Write("cut.model", ReadWholeFile(model_).substr(0, 100));
  for (const std::string& bad : {text_, truncated, scratch_.Write("empty.model", "")}) {
    SCOPED_TRACE(bad);
    const ProcessOutcome run = Poplar({"prepare-data", text_, "-o", "tokens.bin", "--tokenizer", bad});
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_TRUE(IsOneLine(run.err)) << run.err;
    EXPECT_TRUE(ContainsAll(run.err, {bad, "is not a SentencePiece model"})) << run.err;
  }
  for (const auto& entry : std::filesystem::directory_iterator(scratch_.path())) {
    EXPECT_EQ(entry.path().filename().string().find("tokens.bin"), std::string::npos) << entry.path();
  }
  const ProcessOutcome missing = Poplar({"prepare-data", text_, "-o", "tokens.bin", "--tokenizer", "no.model"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(Contains(missing.err, "no.model")) << missing.err;
}

TEST_F(PrepareData, ByteLevelTokensAreAsEverAndTakeAWidthToo) {
  const std::string text = scratch_.Write("ab.txt", "Ab\xff");
  const ProcessOutcome run = Poplar({"prepare-data", text, "-o", "narrow.bin"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ReadWholeFile(scratch_.path() + "/narrow.bin"), std::string("A\0b\0\xff\0", 6));
  const ProcessOutcome wide = Poplar({"prepare-data", text, "-o", "wide.bin", "--token-width", "32"});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  EXPECT_EQ(ReadWholeFile(scratch_.path() + "/wide.bin"),
            TokenFileHeader(32) + std::string("A\0\0\0b\0\0\0\xff\0\0\0", 12));
  const ProcessOutcome odd = Poplar({"prepare-data", text, "-o", "odd.bin", "--token-width", "24"});
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_TRUE(Contains(odd.err, "--token-width")) << odd.err;
}

}  // namespace
}  // namespace poplar::testing
