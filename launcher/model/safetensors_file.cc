#include "launcher/model/safetensors_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/formats/safetensors.h"

namespace poplar {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian: this reader copies their bytes as they are");

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

struct DtypePair {
  SafetensorsDtype file;
  torch::ScalarType torch;
};

constexpr DtypePair kDtypes[] = {
    {SafetensorsDtype::kF32, torch::kFloat32},   {SafetensorsDtype::kF16, torch::kFloat16},
    {SafetensorsDtype::kBF16, torch::kBFloat16}, {SafetensorsDtype::kF64, torch::kFloat64},
    {SafetensorsDtype::kI64, torch::kInt64},     {SafetensorsDtype::kI32, torch::kInt32},
    {SafetensorsDtype::kI16, torch::kInt16},     {SafetensorsDtype::kI8, torch::kInt8},
    {SafetensorsDtype::kU8, torch::kUInt8},      {SafetensorsDtype::kBool, torch::kBool},
};

std::optional<torch::ScalarType> TorchType(SafetensorsDtype dtype) {
  for (const DtypePair& pair : kDtypes) {
    if (pair.file == dtype) return pair.torch;
  }
  return std::nullopt;
}

std::optional<SafetensorsDtype> FileType(torch::ScalarType type) {
  for (const DtypePair& pair : kDtypes) {
    if (pair.torch == type) return pair.file;
  }
  return std::nullopt;
}

// An open file, closed when it goes.
class OpenFile {
 public:
  explicit OpenFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw InputError(path, "", std::string("cannot read: ") + std::strerror(errno));
  }
  ~OpenFile() { ::close(fd_); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  std::uint64_t Size() const {
    struct stat status {};
    if (::fstat(fd_, &status) != 0) throw InputError(path_, "", std::string("cannot read: ") + std::strerror(errno));
    return static_cast<std::uint64_t>(status.st_size);
  }

  // Reads `length` bytes at `offset` into `data`; `what` names them in an error (a
  // tensor, or "" for the header). A file that ends sooner was cut short while read.
  void Read(std::uint64_t offset, std::uint64_t length, void* data, const std::string& what) const {
    char* to = static_cast<char*>(data);
    while (length > 0) {
      const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(length, 1 << 30));
      const ssize_t got = ::pread(fd_, to, chunk, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw InputError(path_, what, std::string("cannot read: ") + std::strerror(errno));
      if (got == 0) throw InputError(path_, what, "the file ended before its bytes did (cut short while read?)");
      to += got;
      offset += static_cast<std::uint64_t>(got);
      length -= static_cast<std::uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_;
};

SafetensorsHeader ReadHeader(const OpenFile& file, std::uint64_t file_size, const std::string& path) {
  std::string prefix(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, kSafetensorsPrefixSize)), '\0');
  file.Read(0, prefix.size(), prefix.data(), "");
  std::string header(static_cast<std::size_t>(SafetensorsHeaderSize(prefix, file_size, path)), '\0');
  file.Read(kSafetensorsPrefixSize, header.size(), header.data(), "");
  return ParseSafetensorsHeader(header, file_size, path);
}

void RequireReadable(const SafetensorsEntry& entry, const std::string& path) {
  if (TorchType(entry.dtype)) return;
  throw InputError(path, entry.name,
                   std::string("has dtype ") + SafetensorsDtypeName(entry.dtype) +
                       ", which poplar does not read (F32, F16, BF16, F64, I64, I32, I16, I8, U8 and BOOL)");
}

// A bool tensor holds 0 or 1 in each byte; torch's bool operations assume as much.
void RequireBooleans(const torch::Tensor& tensor, const std::string& path, const std::string& name) {
  const auto* bytes = static_cast<const unsigned char*>(tensor.data_ptr());
  if (std::any_of(bytes, bytes + tensor.numel(), [](unsigned char byte) { return byte > 1; })) {
    throw InputError(path, name, "holds a BOOL byte other than 0 or 1");
  }
}

torch::Tensor ReadTensor(const OpenFile& file, const SafetensorsEntry& entry, const std::string& path) {
  torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(*TorchType(entry.dtype)));
  file.Read(entry.offset, entry.length, tensor.data_ptr(), entry.name);
  if (entry.dtype == SafetensorsDtype::kBool) RequireBooleans(tensor, path, entry.name);
  return tensor;
}

// The tensors of a shard named by the index `index`, each checked against the index's
// map of tensor -> shard; `tensors` collects every shard's.
void ReadShard(const std::string& dir, const std::string& shard, const std::map<std::string, std::string>& map,
               const std::string& index, StateDict& tensors) {
  const std::string path = (std::filesystem::path(dir) / shard).string();
  StateDict read = ReadSafetensors(path);
  for (auto& [name, tensor] : read) {
    const auto listed = map.find(name);
    if (listed == map.end()) throw InputError(path, name, "is not in " + std::string(kIndexFile) + "'s weight_map");
    if (listed->second != shard) {
      throw InputError(path, name,
                       "is in this shard, but " + std::string(kIndexFile) + " puts it in " + listed->second +
                           " (a tensor in two shards, or in the wrong one)");
    }
    tensors.emplace(name, std::move(tensor));
  }
  for (const auto& [name, file] : map) {
    if (file == shard && !tensors.count(name)) {
      throw InputError(index, "weight_map." + name, "is not in its shard " + shard);
    }
  }
}

StateDict ReadShardedFolder(const std::string& dir, const std::string& index) {
  const std::map<std::string, std::string> map = ParseSafetensorsIndex(ReadTextFile(index), index);
  std::set<std::string> shards;
  for (const auto& [name, shard] : map) {
    std::error_code error;
    if (shards.insert(shard).second && !std::filesystem::exists(std::filesystem::path(dir) / shard, error)) {
      throw InputError(index, "weight_map." + name, "names the shard " + shard + ", which is not in " + dir);
    }
  }
  StateDict tensors;
  for (const std::string& shard : shards) ReadShard(dir, shard, map, index, tensors);
  return tensors;
}

SafetensorsTensor Describe(const std::string& name, const torch::Tensor& tensor, const std::string& path) {
  const std::optional<SafetensorsDtype> dtype = FileType(tensor.scalar_type());
  if (!dtype) {
    throw InputError(path, name,
                     std::string("has dtype ") + c10::toString(tensor.scalar_type()) +
                         ", which poplar does not write to a safetensors file");
  }
  if (name.empty() || name == "__metadata__") {
    throw InputError(path, name, "cannot be a tensor's name in a safetensors file");
  }
  return {name, *dtype, tensor.sizes().vec()};
}

}  // namespace

StateDict ReadSafetensors(const std::string& path) {
  RequireRegularFile(path);
  const OpenFile file(path);
  const std::uint64_t file_size = file.Size();
  const SafetensorsHeader header = ReadHeader(file, file_size, path);
  for (const SafetensorsEntry& entry : header.entries) RequireReadable(entry, path);
  StateDict tensors;
  for (const SafetensorsEntry& entry : header.entries) tensors[entry.name] = ReadTensor(file, entry, path);
  return tensors;
}

void WriteSafetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensor> described;
  for (const auto& [name, tensor] : tensors) described.push_back(Describe(name, tensor, path));
  std::map<std::string, std::string> written = metadata;
  written.emplace("format", "pt");
  std::string header;
  try {
    header = SafetensorsHeaderBytes(described, written);
  } catch (const std::invalid_argument& error) {
    throw InputError(path, "", error.what());
  }
  // One tensor's CPU copy at a time in memory, not the file.
  WriteFileAtomically(path, [&](const AppendBytes& append) {
    append(header);
    for (const auto& [name, tensor] : tensors) {
      const torch::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
      append(std::string_view(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes()));
    }
  });
}

StateDict ReadHuggingFaceFolder(const std::string& dir) {
  const std::filesystem::path folder(dir);
  std::error_code error;
  if (std::filesystem::exists(folder / kSingleFile, error)) return ReadSafetensors((folder / kSingleFile).string());
  if (std::filesystem::exists(folder / kIndexFile, error))
    return ReadShardedFolder(dir, (folder / kIndexFile).string());
  if (!std::filesystem::is_directory(folder, error)) throw InputError(dir, "", "is not a folder");
  throw InputError(dir, "", std::string("holds neither ") + kSingleFile + " nor " + kIndexFile);
}

}  // namespace poplar
