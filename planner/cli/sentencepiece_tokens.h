// Tokenising text with a SentencePiece model (`poplar prepare-data --tokenizer`), through
// libpoplar_sentencepiece.so (planner/cli/sentencepiece_shim.cc), which the `poplar`
// program opens when asked; the planner's libraries know nothing of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace poplar {

struct SentencePieceTokens {
  std::vector<std::uint32_t> ids;
  int vocab_size = 0;  // the model's pieces: the vocab_size a model needs for these ids
};

// The ids of `text` under the SentencePiece model `model_path`: each line (with its line
// end, which the model's normaliser keeps or drops) encoded on its own, the ids joined
// in order. Throws InputError naming `model_path` when it cannot be read or is not a
// SentencePiece model, or has more pieces than a model's vocab_size may (2^24); and when
// libpoplar_sentencepiece.so cannot be loaded (beside the program or in ../lib/poplar).
SentencePieceTokens TokeniseWithSentencePiece(const std::string& text, const std::string& model_path);

}  // namespace poplar
