#include "launcher/model/state_dict.h"

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/version.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <regex>
#include <set>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {

std::string ShapeText(const torch::Tensor& tensor) {
  std::string text = "[";
  for (int64_t i = 0; i < tensor.dim(); ++i) text += (i ? ", " : "") + std::to_string(tensor.size(i));
  return text + "]";
}

namespace {

// A tensor read from a file lies within the bytes its file gave it: a damaged file (a
// data record cut short, an offset or shape past its end) would otherwise be read past
// the end of the buffer, crashing the worker or training on whatever lay beyond.
void RequireWithinStorage(const torch::Tensor& tensor, const std::string& path, const std::string& name) {
  if (tensor.numel() == 0) return;
  const std::int64_t held = static_cast<std::int64_t>(tensor.storage().nbytes());
  const auto damaged = [&](const std::string& what) {
    throw InputError(path, name, what + " (a damaged or truncated file)");
  };
  if (tensor.storage_offset() < 0) damaged("has a negative storage offset");
  // The last element's byte end, in arithmetic that cannot wrap: a crafted stride of
  // 2^60 or offset of 2^61 must not overflow this sum past the check.
  std::int64_t last = tensor.storage_offset();
  for (std::int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.stride(d) < 0) damaged("has a negative stride");
    std::int64_t reach = 0;
    if (__builtin_mul_overflow(tensor.size(d) - 1, tensor.stride(d), &reach) ||
        __builtin_add_overflow(last, reach, &last)) {
      damaged("reaches beyond any storage (its strides or offset overflow)");
    }
  }
  std::int64_t needed = 0;
  if (__builtin_add_overflow(last, 1, &needed) ||
      __builtin_mul_overflow(needed, static_cast<std::int64_t>(tensor.element_size()), &needed)) {
    damaged("reaches beyond any storage (its strides or offset overflow)");
  }
  if (needed > held) {
    damaged("needs " + std::to_string(needed) + " bytes of data but the file holds " + std::to_string(held) +
            " for it");
  }
}

// The archive's bytes, as PyTorchStreamReader reads them (no second copy).
class BytesReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// Every tensor's storage has a data record of its size. The unpickler takes a storage's
// size from the pickle and its bytes from the record, trusting that they agree: a
// record cut short would be read past its end, crashing the worker or training on
// whatever lay beyond. (The sizes are matched as multisets: records are named by
// storage, which libtorch does not tell a tensor's.)
void RequireDataRecords(caffe2::serialize::PyTorchStreamReader& reader, const StateDict& tensors,
                        const std::string& path) {
  std::multiset<std::int64_t> records;
  for (const std::string& name : reader.getAllRecords()) {
    if (name.rfind("data/", 0) == 0) records.insert(static_cast<std::int64_t>(std::get<1>(reader.getRecord(name))));
  }
  std::set<const void*> seen;  // tied weights share a storage, and its record
  for (const auto& [name, tensor] : tensors) {
    if (!seen.insert(tensor.storage().data()).second) continue;
    const auto record = records.find(static_cast<std::int64_t>(tensor.storage().nbytes()));
    if (record == records.end()) {
      const auto nbytes = tensor.storage().nbytes();
      const bool alike = std::count_if(tensors.begin(), tensors.end(), [nbytes](const auto& other) {
                           return other.second.storage().nbytes() == nbytes;
                         }) > 1;
      throw InputError(path, "",
                       "is damaged or truncated: no data record holds the " + std::to_string(nbytes) + " bytes of " +
                           name + (alike ? " or of another tensor of that size" : ""));
    }
    records.erase(record);
  }
}

// Why libtorch could not read state dict `path`, as one line for a user: its words
// without their "[enforce fail at inline_container.cc:165] . " source prefix; a file
// written by a newer PyTorch is said to be one (libtorch advises upgrading PyTorch,
// which a user of poplar-worker has no say in).
InputError ReadFailure(const std::string& path, std::string reason, const std::string& damaged) {
  reason = FirstLine(reason);
  static const std::regex kEnforce(R"(^\[enforce fail at [^\]]*\]\s*\.?\s*)");
  reason = std::regex_replace(reason, kEnforce, "");
  static const std::regex kVersion(
      R"(file with version (\d+), but the maximum supported version for reading is (\d+))");
  if (std::smatch found; std::regex_search(reason, found, kVersion)) {
    return InputError(path, "",
                      "was written by a newer PyTorch, in file format " + found[1].str() + "; this worker's libtorch " +
                          TORCH_VERSION + " reads formats up to " + found[2].str() +
                          ": save it with a PyTorch that writes one of those");
  }
  if (reason.find("INTERNAL ASSERT") != std::string::npos) reason = "its dict is not what it says it is";
  return InputError(path, "", "not a state dict saved with torch.save(dict)" + damaged + ": " + reason);
}

}  // namespace

StateDict ReadStateDict(const std::string& path) {
  const std::string bytes = ReadTextFile(path);
  std::optional<caffe2::serialize::PyTorchStreamReader> reader;
  c10::IValue value;
  try {
    // torch::pickle_load, with one storage per data record and every tensor on the CPU:
    // Python's torch.save names a storage that tensors share (nanoGPT's tied wte and
    // lm_head) by the same record each time, which pickle_load loads anew every time it
    // is named; and it moves each tensor to the device it was saved from (a GPU model's
    // state_dict()), one by one, unsharing them again (and failing without a GPU).
    reader.emplace(std::make_shared<BytesReader>(bytes));
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              /*type_resolver=*/{}, /*obj_loader=*/{},
                                              /*device=*/at::Device(at::kCPU), *reader,
                                              torch::jit::Unpickler::defaultTypeParser,
                                              std::make_shared<torch::jit::DeserializationStorageContext>());
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the device's memory, not the file: the caller names what ran out
  } catch (const c10::Error& error) {
    throw ReadFailure(path, error.what_without_backtrace(), "");
  } catch (const std::exception& error) {
    throw ReadFailure(path, error.what(), "");
  }
  if (!value.isGenericDict()) {
    throw InputError(path, "",
                     "holds a " + value.tagKind() + ", not a dict of tensors (save dict(model.state_dict()))");
  }
  StateDict tensors;
  try {
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.key().isString()) throw InputError(path, "", "has a key that is not a string");
      const std::string name = entry.key().toStringRef();
      if (!entry.value().isTensor()) throw InputError(path, name, "is not a tensor");
      tensors[name] = entry.value().toTensor();
      RequireWithinStorage(tensors[name], path, name);
    }
    RequireDataRecords(*reader, tensors, path);
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& error) {  // a damaged or crafted file: libtorch's own checks
    throw ReadFailure(path, error.what_without_backtrace(), " (a damaged file?)");
  }
  return tensors;
}

void WriteStateDict(const std::string& path, const StateDict& tensors) {
  // Each tensor is saved with a storage of its own, no larger than it (a view into a
  // flat ZeRO buffer would save the whole buffer, and a tied tensor would share): a
  // copy is made only where that is not so already (the checkpoint writer's tensors are
  // private copies; a GPT-2 medium checkpoint is gigabytes).
  c10::Dict<std::string, at::Tensor> dict;
  std::set<const void*> storages;
  for (const auto& [name, tensor] : tensors) {
    const bool own_storage = tensor.is_contiguous() && tensor.storage_offset() == 0 &&
                             tensor.storage().nbytes() == tensor.nbytes() &&
                             storages.insert(tensor.storage().data()).second;
    dict.insert(name, own_storage ? tensor : tensor.contiguous().clone());
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  WriteFileAtomically(path, std::string_view(bytes.data(), bytes.size()));
}

StateDict ModelStateDict(const DecoderImpl& model) {
  StateDict tensors;
  for (const auto& [name, parameter] : model.NamedParameters()) {
    tensors[name] = parameter.detach().cpu().clone();
  }
  AddTiedHead(model.tied_head(), tensors);
  return tensors;
}

void LoadModelState(DecoderImpl& model, const StateDict& tensors, const std::string& file) {
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;
  for (auto& [name, parameter] : model.NamedParameters()) {
    expected.insert(name);
    auto found = tensors.find(name);
    if (found == tensors.end()) throw InputError(file, name, "is missing");
    if (found->second.sizes() != parameter.sizes()) {
      throw InputError(file, name,
                       "has shape " + ShapeText(found->second) + ", the model needs " + ShapeText(parameter));
    }
    parameter.copy_(found->second.to(torch::kFloat32));
  }
  const std::optional<TiedHead> tied = model.tied_head();
  for (const auto& [name, tensor] : tensors) {
    if (tied && name == tied->head) {
      if (!tensor.to(torch::kFloat32).equal(tensors.at(tied->embedding).to(torch::kFloat32))) {
        throw InputError(file, name, "differs from " + tied->embedding + " but the head is tied to the embedding");
      }
    } else if (!expected.count(name)) {
      throw InputError(file, name, "is not a parameter of this model");
    }
  }
}

}  // namespace poplar
