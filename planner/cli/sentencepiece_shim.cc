// The sentencepiece library behind a C function, built as its own shared library
// (libpoplar_sentencepiece.so) that `poplar` opens with dlopen(RTLD_DEEPBIND) when
// `prepare-data --tokenizer` asks (planner/cli/sentencepiece_tokens.h). Debian's
// libsentencepiece carries its own Protocol Buffers runtime (3.14) and exports it;
// linked into `poplar`, beside gRPC's libprotobuf (3.21), one of the two runtimes
// would serve both and its version check would abort the program. Opened apart, each
// library binds to its own.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

void CopyError(const char* message, char* error, std::size_t error_size) {
  if (error_size == 0) return;
  std::strncpy(error, message, error_size - 1);
  error[error_size - 1] = '\0';
}

}  // namespace

// Encodes `text` with the serialized SentencePiece model `model`, each line (with its
// line end) on its own, passing the ids to `append` in order; `vocab_size` gets the
// model's piece count. Returns 0; or 1 when `model` is not a model, 2 when a line
// cannot be encoded (`error_byte` its first byte), with the library's message in
// `error`. Never throws.
extern "C" __attribute__((visibility("default"))) int poplar_sentencepiece_encode(
    const char* model, std::size_t model_size, const char* text, std::size_t text_size, int* vocab_size,
    void (*append)(void* context, const int* ids, std::size_t count), void* context, std::size_t* error_byte,
    char* error, std::size_t error_size) {
  try {
    sentencepiece::SentencePieceProcessor processor;
    if (const auto status = processor.LoadFromSerializedProto(std::string_view(model, model_size)); !status.ok()) {
      CopyError(status.message(), error, error_size);
      return 1;
    }
    *vocab_size = processor.GetPieceSize();
    std::vector<int> ids;
    for (std::size_t begin = 0; begin < text_size;) {
      const auto* newline = static_cast<const char*>(std::memchr(text + begin, '\n', text_size - begin));
      const std::size_t end = newline == nullptr ? text_size : static_cast<std::size_t>(newline - text) + 1;
      if (const auto status = processor.Encode(std::string_view(text + begin, end - begin), &ids); !status.ok()) {
        *error_byte = begin;
        CopyError(status.message(), error, error_size);
        return 2;
      }
      append(context, ids.data(), ids.size());
      begin = end;
    }
    return 0;
  } catch (const std::exception& failure) {
    CopyError(failure.what(), error, error_size);
    return 1;
  }
}
