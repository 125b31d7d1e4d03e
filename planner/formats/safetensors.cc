#include "planner/formats/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  int size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kI64, "I64", 8},        {SafetensorsDtype::kU64, "U64", 8},
    {SafetensorsDtype::kF64, "F64", 8},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  throw std::logic_error("SafetensorsDtype without a name");
}

std::string DtypeNames() {
  std::string names;
  for (const DtypeInfo& info : kDtypes) names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

constexpr char kMetadataKey[] = "__metadata__";

// A JSON integer >= 0 that fits 64 bits; nullopt for anything else.
std::optional<std::uint64_t> Unsigned(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
  return std::nullopt;
}

std::string Shown(const nlohmann::json& value) { return Printable(value.dump()); }

// The element count of `shape`, or nullopt when it does not fit 64 bits.
std::optional<std::uint64_t> ElementCount(const std::vector<std::int64_t>& shape) {
  std::uint64_t count = 1;
  for (const std::int64_t size : shape) {
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(size), &count)) return std::nullopt;
  }
  return count;
}

std::vector<std::int64_t> ReadShape(JsonFields& fields) {
  const nlohmann::json& list = fields.List("shape", 0, "a list of sizes, integers >= 0");
  std::vector<std::int64_t> shape;
  for (const nlohmann::json& size : list) {
    const std::optional<std::uint64_t> value = Unsigned(size);
    if (!value || *value > static_cast<std::uint64_t>(INT64_MAX)) {
      fields.Fail("shape", "must be a list of sizes, integers from 0 to 9223372036854775807, got " + Shown(list));
    }
    shape.push_back(static_cast<std::int64_t>(*value));
  }
  return shape;
}

// [begin, end) in the data region.
std::pair<std::uint64_t, std::uint64_t> ReadOffsets(JsonFields& fields) {
  const nlohmann::json& list = fields.List("data_offsets", 2, "a list of two byte offsets [begin, end]");
  const std::optional<std::uint64_t> begin = Unsigned(list[0]);
  const std::optional<std::uint64_t> end = list.size() == 2 ? Unsigned(list[1]) : std::nullopt;
  if (!begin || !end) {
    fields.Fail(
        "data_offsets",
        "must be a list of two byte offsets [begin, end], integers >= 0 of at most 64 bits, got " + Shown(list));
  }
  if (*begin > *end) fields.Fail("data_offsets", "must not begin after it ends, got " + Shown(list));
  return {*begin, *end};
}

// One tensor's entry; `region` is the data region's size.
SafetensorsEntry ReadEntry(const std::string& name, const nlohmann::json& node, std::uint64_t data_start,
                           std::uint64_t region, const std::string& path) {
  if (name.empty()) throw InputError(path, "", "names a tensor with the empty string");
  JsonFields fields(node, path, name);
  SafetensorsEntry entry;
  entry.name = name;
  const std::string dtype = fields.String("dtype");
  const std::optional<SafetensorsDtype> known = SafetensorsDtypeFromName(dtype);
  if (!known) fields.Fail("dtype", "must be one of " + DtypeNames() + ", got \"" + Printable(dtype) + "\"");
  entry.dtype = *known;
  entry.shape = ReadShape(fields);
  const auto [begin, end] = ReadOffsets(fields);
  fields.Finish();
  const std::optional<std::uint64_t> count = ElementCount(entry.shape);
  const std::uint64_t size = SafetensorsDtypeSize(entry.dtype);
  std::uint64_t bytes = 0;
  if (!count || __builtin_mul_overflow(*count, size, &bytes)) {
    fields.Fail("shape", "has more bytes than 64 bits count (a damaged or crafted file)");
  }
  if (bytes != end - begin) {
    fields.Fail("data_offsets", "hold " + std::to_string(end - begin) + " bytes, but " + std::to_string(*count) +
                                    " elements of " + dtype + " are " + std::to_string(bytes));
  }
  if (end > region) {
    fields.Fail("data_offsets", "end at byte " + std::to_string(end) + ", beyond the data region's " +
                                    std::to_string(region) + " bytes (a truncated file?)");
  }
  entry.offset = data_start + begin;
  entry.length = bytes;
  return entry;
}

std::map<std::string, std::string> ReadMetadata(const nlohmann::json& node, const std::string& path) {
  if (!node.is_object()) throw InputError(path, kMetadataKey, "must be an object of strings, got " + Shown(node));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : node.items()) {
    if (!value.is_string()) {
      throw InputError(path, std::string(kMetadataKey) + "." + key, "must be a string, got " + Shown(value));
    }
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// Every byte of the data region, [data_start, data_start + region), is one tensor's:
// `entries` are sorted by offset.
void RequireTiling(const std::vector<SafetensorsEntry>& entries, std::uint64_t data_start, std::uint64_t region,
                   const std::string& path) {
  std::uint64_t covered = data_start;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& entry : entries) {
    if (entry.offset < covered) {
      throw InputError(path, entry.name, "has bytes that overlap those of " + previous->name);
    }
    if (entry.offset > covered) {
      throw InputError(path, entry.name,
                       "begins at byte " + std::to_string(entry.offset - data_start) + " of the data region, but the " +
                           "tensors before it end at byte " + std::to_string(covered - data_start) +
                           ": the bytes between belong to no tensor (the format allows no holes)");
    }
    covered = entry.offset + entry.length;
    previous = &entry;
  }
  if (covered != data_start + region) {
    throw InputError(path, "",
                     "has " + std::to_string(data_start + region - covered) +
                         " bytes after the last tensor's that belong to no tensor (the format allows no holes)");
  }
}

void AppendLittleEndian(std::string& bytes, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((value >> (8 * i)) & 0xff);
}

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) { return Info(dtype).name; }

int SafetensorsDtypeSize(SafetensorsDtype dtype) { return Info(dtype).size; }

std::optional<SafetensorsDtype> SafetensorsDtypeFromName(const std::string& name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}

std::uint64_t SafetensorsHeaderSize(const std::string& prefix, std::uint64_t file_size, const std::string& path) {
  if (file_size < kSafetensorsPrefixSize || prefix.size() < kSafetensorsPrefixSize) {
    throw InputError(path, "",
                     "is not a safetensors file: it has " +
                         std::to_string(std::min<std::uint64_t>(file_size, prefix.size())) +
                         " bytes, fewer than the 8 of the header's length");
  }
  std::uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = (size << 8) | static_cast<unsigned char>(prefix[i]);
  if (size > kSafetensorsMaxHeaderSize) {
    throw InputError(path, "",
                     "is not a safetensors file: its first 8 bytes give a header of " + std::to_string(size) +
                         " bytes, more than the " + std::to_string(kSafetensorsMaxHeaderSize) + " allowed");
  }
  if (size > file_size - kSafetensorsPrefixSize) {
    throw InputError(path, "",
                     "is truncated or not a safetensors file: its header of " + std::to_string(size) +
                         " bytes is longer than the " + std::to_string(file_size - kSafetensorsPrefixSize) +
                         " bytes after its first 8");
  }
  return size;
}

SafetensorsHeader ParseSafetensorsHeader(const std::string& header, std::uint64_t file_size, const std::string& path) {
  if (header.size() > kSafetensorsMaxHeaderSize || file_size < kSafetensorsPrefixSize + header.size()) {
    throw InputError(path, "", "has a header longer than the file (" + std::to_string(file_size) + " bytes)");
  }
  const nlohmann::json document = ParseJsonObject(header, path);
  const std::uint64_t data_start = kSafetensorsPrefixSize + header.size();
  const std::uint64_t region = file_size - data_start;
  SafetensorsHeader parsed;
  parsed.header_size = header.size();
  for (const auto& [name, node] : document.items()) {
    if (name == kMetadataKey) {
      parsed.metadata = ReadMetadata(node, path);
    } else {
      parsed.entries.push_back(ReadEntry(name, node, data_start, region, path));
    }
  }
  std::stable_sort(parsed.entries.begin(), parsed.entries.end(), [](const auto& a, const auto& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.length < b.length;
  });
  RequireTiling(parsed.entries, data_start, region, path);
  return parsed;
}

std::string SafetensorsHeaderBytes(const std::vector<SafetensorsTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json document = nlohmann::ordered_json::object();
  if (!metadata.empty()) document[kMetadataKey] = metadata;
  std::uint64_t begin = 0;
  for (const SafetensorsTensor& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey || document.contains(tensor.name)) {
      throw std::invalid_argument("a safetensors file cannot hold a tensor named \"" + tensor.name +
                                  "\" (empty, reserved or given twice)");
    }
    const bool negative = std::any_of(tensor.shape.begin(), tensor.shape.end(), [](auto size) { return size < 0; });
    const std::optional<std::uint64_t> count = negative ? std::nullopt : ElementCount(tensor.shape);
    std::uint64_t bytes = 0, end = 0;
    if (!count || __builtin_mul_overflow(*count, SafetensorsDtypeSize(tensor.dtype), &bytes) ||
        __builtin_add_overflow(begin, bytes, &end)) {
      throw std::invalid_argument("tensor \"" + tensor.name + "\" has a negative size or bytes beyond 64 bits");
    }
    document[tensor.name] = {
        {"dtype", SafetensorsDtypeName(tensor.dtype)}, {"shape", tensor.shape}, {"data_offsets", {begin, end}}};
    begin = end;
  }
  std::string header;
  try {
    header = document.dump();
  } catch (const nlohmann::json::type_error&) {
    throw std::invalid_argument("a tensor's name or the metadata is not UTF-8 text");
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes;
  AppendLittleEndian(bytes, header.size());
  return bytes + header;
}

std::map<std::string, std::string> ParseSafetensorsIndex(const std::string& text, const std::string& path) {
  const nlohmann::json document = ParseJsonObject(text, path);
  JsonFields fields(document, path, "");
  const nlohmann::json& metadata = fields.Child("metadata");
  if (!metadata.is_null() && !metadata.is_object()) fields.Fail("metadata", "must be an object");
  JsonFields weight_map = fields.Map("weight_map");
  fields.Finish();
  std::map<std::string, std::string> shards;
  for (const auto& [name, file] : document.at("weight_map").items()) {
    if (name.empty()) weight_map.Fail(name, "names a tensor with the empty string");
    if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
      weight_map.Fail(name,
                      "must be the name of a shard file in the index's folder (no '/', not '..'), got " + Shown(file));
    }
    shards[name] = file.get<std::string>();
  }
  if (shards.empty()) fields.Fail("weight_map", "must name at least one tensor");
  return shards;
}

}  // namespace poplar
