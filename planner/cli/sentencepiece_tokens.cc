#include "planner/cli/sentencepiece_tokens.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstddef>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

constexpr int kLargestVocabulary = 1 << 24;  // a model's vocab_size (planner/formats/model_config.h)
constexpr const char* kShim = "libpoplar_sentencepiece.so";

using EncodeFunction = int (*)(const char*, std::size_t, const char*, std::size_t, int*,
                               void (*)(void*, const int*, std::size_t), void*, std::size_t*, char*, std::size_t);

// The folder of the running program (/proc/self/exe), "" if unknown.
std::string ProgramFolder() {
  char path[PATH_MAX];
  const ssize_t size = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (size <= 0) return "";
  return ParentFolder(std::string(path, static_cast<std::size_t>(size)));
}

// The shim's encode function (planner/cli/sentencepiece_shim.cc): beside the program (a
// build tree), else in ../lib/poplar (an installation). Opened with RTLD_DEEPBIND so
// that the sentencepiece library binds to its own Protocol Buffers runtime.
EncodeFunction OpenShim(const std::string& model_path) {
  const std::string folder = ProgramFolder();
  std::string reasons;
  for (const std::string& path : {folder + "/" + kShim, folder + "/../lib/poplar/" + kShim}) {
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (library == nullptr) {
      reasons += std::string(reasons.empty() ? "" : "; ") + ::dlerror();
      continue;
    }
    if (void* encode = ::dlsym(library, "poplar_sentencepiece_encode"); encode != nullptr) {
      return reinterpret_cast<EncodeFunction>(encode);
    }
    reasons += "; " + path + " has no poplar_sentencepiece_encode";
  }
  throw InputError(model_path, "", std::string("cannot load SentencePiece (") + kShim + "): " + FirstLine(reasons));
}

void AppendIds(void* context, const int* ids, std::size_t count) {
  auto& all = *static_cast<std::vector<std::uint32_t>*>(context);
  all.insert(all.end(), ids, ids + count);
}

}  // namespace

SentencePieceTokens TokeniseWithSentencePiece(const std::string& text, const std::string& model_path) {
  // Read here, so that an unreadable path is named as every other file is.
  const std::string model = ReadTextFile(model_path);
  const EncodeFunction encode = OpenShim(model_path);
  SentencePieceTokens tokens;
  std::size_t error_byte = 0;
  char error[512] = "";
  const int outcome = encode(model.data(), model.size(), text.data(), text.size(), &tokens.vocab_size, AppendIds,
                             &tokens.ids, &error_byte, error, sizeof error);
  // The library's own reason for a model it refuses names its source lines, not the file.
  if (outcome == 1) {
    throw InputError(model_path, "", "is not a SentencePiece model (a .model file of spm_train, or a tokenizer.model)");
  }
  if (outcome != 0) {
    throw InputError(model_path, "",
                     "cannot encode byte " + std::to_string(error_byte) + " of the text: " + FirstLine(error));
  }
  if (tokens.vocab_size <= 0 || tokens.vocab_size > kLargestVocabulary) {
    throw InputError(model_path, "",
                     "has " + std::to_string(tokens.vocab_size) + " pieces; a model's vocab_size is 1 to " +
                         std::to_string(kLargestVocabulary));
  }
  return tokens;
}

}  // namespace poplar
