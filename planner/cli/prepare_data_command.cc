// `poplar prepare-data TEXT -o TOKENS.bin`: byte-level tokenisation of a text file into
// the worker's token format (little-endian uint16, one token per byte, vocabulary 256).
#include <cstdint>
#include <iostream>
#include <memory>

#include "planner/base/input_error.h"
#include "planner/base/run_app.h"
#include "planner/base/text_file.h"
#include "planner/cli/commands.h"

namespace poplar {
namespace {

struct PrepareOptions {
  std::string text_file;
  std::string output;
};

void Run(const PrepareOptions& options) {
  RequireOutputApart(options.output, {{options.text_file, "the text file itself"}}, "--output");
  const std::string text = ReadTextFile(options.text_file);
  if (text.size() < 2) throw InputError(options.text_file, "", "needs at least 2 bytes of text");
  std::string tokens;
  tokens.reserve(text.size() * 2);
  for (unsigned char byte : text) {
    tokens.push_back(static_cast<char>(byte));  // low byte first: little-endian uint16
    tokens.push_back('\0');
  }
  WriteFileAtomically(options.output, tokens);
  std::cout << "wrote " << text.size() << " tokens (byte-level, vocabulary 256) to " << options.output << "\n";
}

}  // namespace

void RegisterPrepareDataCommand(CLI::App& app) {
  auto options = std::make_shared<PrepareOptions>();
  CLI::App* command =
      app.add_subcommand("prepare-data", "Tokenise a text file byte by byte into a uint16 token file for training");
  command->add_option("text", options->text_file, "Text file (UTF-8 or any bytes)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("-o,--output", options->output, "Token file to write (uint16 little-endian)")
      ->check(NotEmpty())
      ->required();
  command->callback([options] { Run(*options); });
}

}  // namespace poplar
