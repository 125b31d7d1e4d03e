// `poplar prepare-data TEXT -o TOKENS.bin [--tokenizer MODEL] [--token-width 16|32]`:
// a text file tokenised into the worker's token file (planner/formats/token_file.h).
// Byte by byte by default (one token per byte, vocabulary 256: headerless uint16, as
// nanoGPT's .bin), or with a SentencePiece model (planner/cli/sentencepiece_tokens.h).
// The token width is 16 bits when the vocabulary fits, else 32, unless --token-width
// says; 32 bits writes the header.
#include <cstdint>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "planner/base/input_error.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/cli/commands.h"
#include "planner/cli/sentencepiece_tokens.h"
#include "planner/formats/token_file.h"

namespace poplar {
namespace {

constexpr int kLargestNarrowVocabulary = 1 << 16;

struct PrepareOptions {
  std::string text_file;
  std::string output;
  std::string tokenizer;  // a SentencePiece model; empty: byte-level
  int token_width = 0;    // 16 or 32; 0: the narrowest that fits the vocabulary
  bool json = false;
};

// What was written: one line of words, or with --json one document.
void SayWritten(const PrepareOptions& options, std::size_t tokens, int vocab_size, int width) {
  const std::string tokenizer = options.tokenizer.empty() ? "bytes" : options.tokenizer;
  if (options.json) {
    std::cout << nlohmann::ordered_json{{"output", options.output},
                                        {"tokens", tokens},
                                        {"vocab_size", vocab_size},
                                        {"token_width", width},
                                        {"tokenizer", tokenizer}}
                     .dump(2)
              << "\n";
    return;
  }
  if (options.tokenizer.empty()) {
    std::cout << "wrote " << tokens << " tokens (byte-level, vocabulary 256, uint" << width << ") to " << options.output
              << "\n";
    return;
  }
  std::cout << "wrote " << tokens << " tokens (SentencePiece " << options.tokenizer << ", vocabulary " << vocab_size
            << ", uint" << width << ") to " << options.output << "\n"
            << "the model configuration needs \"vocab_size\": " << vocab_size << " (or more)\n";
}

// The token width to write for a vocabulary of `vocab_size` ids: --token-width, checked
// against it, or the narrowest that fits.
int TokenWidth(const PrepareOptions& options, int vocab_size) {
  if (options.token_width == 0) return vocab_size <= kLargestNarrowVocabulary ? 16 : 32;
  if (options.token_width == 16 && vocab_size > kLargestNarrowVocabulary) {
    throw InputError(
        "--token-width", "",
        "16 bits cannot hold the ids of a vocabulary of " + std::to_string(vocab_size) + " (at most 65536); use 32");
  }
  return options.token_width;
}

std::uint32_t Id(char byte) { return static_cast<unsigned char>(byte); }
std::uint32_t Id(std::uint32_t id) { return id; }

// The bytes of the token file of `ids` (a text's bytes, or ids) at `width` bits.
template <typename Ids>
std::string TokenFile(const Ids& ids, int width) {
  std::string bytes = TokenFileHeader(width);
  bytes.reserve(bytes.size() + ids.size() * static_cast<std::size_t>(width / 8));
  for (const auto id : ids) AppendToken(bytes, Id(id), width);
  return bytes;
}

void Run(const PrepareOptions& options) {
  std::vector<InputFile> inputs = {{options.text_file, "the text file itself"}};
  if (!options.tokenizer.empty()) inputs.push_back({options.tokenizer, "the tokenizer (--tokenizer)"});
  RequireOutputApart(options.output, inputs, "--output");
  const std::string text = ReadTextFile(options.text_file);
  if (text.size() < 2) throw InputError(options.text_file, "", "needs at least 2 bytes of text");
  if (options.tokenizer.empty()) {
    const int width = TokenWidth(options, 256);
    WriteFileAtomically(options.output, TokenFile(text, width));
    SayWritten(options, text.size(), 256, width);
    return;
  }
  const SentencePieceTokens tokens = TokeniseWithSentencePiece(text, options.tokenizer);
  if (tokens.ids.size() < 2) throw InputError(options.text_file, "", "needs at least 2 tokens");
  const int width = TokenWidth(options, tokens.vocab_size);
  WriteFileAtomically(options.output, TokenFile(tokens.ids, width));
  SayWritten(options, tokens.ids.size(), tokens.vocab_size, width);
}

}  // namespace

void RegisterPrepareDataCommand(CLI::App& app) {
  auto options = std::make_shared<PrepareOptions>();
  CLI::App* command = app.add_subcommand(
      "prepare-data", "Tokenise a text file (byte by byte, or with a SentencePiece model) into a token file");
  command->add_option("text", options->text_file, "Text file (UTF-8 or any bytes)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("-o,--output", options->output, "Token file to write (docs/formats.md, \"Token file\")")
      ->check(NotEmpty())
      ->required();
  command->add_option("--tokenizer", options->tokenizer, "SentencePiece model (.model); default: one token per byte")
      ->check(CLI::ExistingFile);
  command
      ->add_option("--token-width", options->token_width,
                   "Bits per token, 16 or 32 (32 writes a header); default: 16 when the vocabulary fits, else 32")
      ->check(CLI::IsMember({16, 32}));
  command->add_flag("--json", options->json,
                    "Print one JSON document on stdout: output, tokens, vocab_size, token_width, tokenizer");
  command->callback([options] { Run(*options); });
}

}  // namespace poplar
