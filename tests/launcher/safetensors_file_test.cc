// Safetensors files and Hugging Face folders (launcher/model/safetensors_file.h): what
// poplar writes it reads back, and so does a reader written from the format's spec in
// Python; what that Python writes poplar reads; a sharded folder; and the damaged ones.
// tests/scripts/write_safetensors.py is the Python side, sample_tensors() there the
// same tensors as SampleTensors() here.
#include "launcher/model/safetensors_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/formats/safetensors.h"
#include "test_support.h"

namespace poplar::testing {
namespace {

const std::string kScript = POPLAR_SOURCE_DIR "/tests/scripts/write_safetensors.py";

// One tensor of each dtype poplar reads, a scalar and an empty one.
StateDict SampleTensors() {
  const double big = std::ldexp(1.0, 100);
  return {
      {"f32", torch::tensor({-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, big}, torch::kFloat32)
                  .reshape({3, 4})},
      {"f16", torch::tensor({-0.75, -0.5, -0.25, 0.0, 0.25, 65504.0}, torch::kFloat16).reshape({2, 3})},
      {"bf16", torch::tensor({0.0, 1.5, -3.0, big}, torch::kBFloat16)},
      {"f64", torch::tensor({1.0 / 3.0, -2.5}, torch::kFloat64)},
      {"i64", torch::tensor({-(std::int64_t{1} << 40), std::int64_t{7}, std::int64_t{1} << 62}, torch::kInt64)},
      {"i32", torch::tensor({-3, -2, -1, 0, 1, 2147483647}, torch::kInt32).reshape({2, 3})},
      {"i16", torch::tensor({-300, 300}, torch::kInt16)},
      {"i8", torch::tensor({-128, 127, 0}, torch::kInt8)},
      {"u8", torch::tensor({0, 255, 7}, torch::kUInt8)},
      {"mask", torch::tensor({true, false, true}, torch::kBool)},
      {"scalar", torch::scalar_tensor(3.25, torch::kFloat32)},
      {"empty", torch::zeros({0, 4})},
  };
}

void ExpectSame(const StateDict& got, const StateDict& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    EXPECT_EQ(got.at(name).scalar_type(), tensor.scalar_type());
    EXPECT_EQ(got.at(name).sizes(), tensor.sizes());
    EXPECT_TRUE(torch::equal(got.at(name), tensor));
  }
}

// The exit status of the Python side run with `command` (write or check) on `path`.
int RunPython(const std::string& command, const std::string& path) {
  const int status = std::system(("/usr/bin/python3 '" + kScript + "' " + command + " '" + path + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A file of `header` and then `data`.
std::string RawFile(const ScratchDir& dir, const std::string& name, const std::vector<SafetensorsTensor>& header,
                    const std::string& data) {
  return dir.Write(name, SafetensorsHeaderBytes(header, {}) + data);
}

TEST(SafetensorsFile, WhatItWritesItReadsBackInEveryDtype) {
  ScratchDir dir("safetensors");
  const std::string path = dir.path() + "/model.safetensors";
  WriteSafetensors(path, SampleTensors());
  ExpectSame(ReadSafetensors(path), SampleTensors());
}

TEST(SafetensorsFile, WritesViewsAndTiedTensorsAsTheirValues) {
  ScratchDir dir("safetensors");
  const std::string path = dir.path() + "/views.safetensors";
  const torch::Tensor base = torch::arange(12, torch::kFloat32).reshape({3, 4});
  const StateDict tensors = {{"transposed", base.t()}, {"row", base[1]}, {"wte", base}, {"lm_head", base}};
  WriteSafetensors(path, tensors);
  ExpectSame(ReadSafetensors(path),
             {{"transposed", base.t().contiguous()}, {"row", base[1]}, {"wte", base}, {"lm_head", base}});
}

TEST(SafetensorsFile, ReadsWhatTheSpecsPythonWrites) {
  ScratchDir dir("safetensors");
  const std::string path = dir.path() + "/python.safetensors";
  ASSERT_EQ(RunPython("write", path), 0);
  ExpectSame(ReadSafetensors(path), SampleTensors());
}

TEST(SafetensorsFile, TheSpecsPythonReadsWhatItWrites) {
  ScratchDir dir("safetensors");
  const std::string path = dir.path() + "/poplar.safetensors";
  WriteSafetensors(path, SampleTensors());
  EXPECT_EQ(RunPython("check", path), 0);  // the values, metadata format "pt", header padded to 8 bytes
}

TEST(SafetensorsFile, RefusesDamagedFilesNamingTheTensor) {
  ScratchDir dir("safetensors");
  const std::string path = dir.path() + "/model.safetensors";
  WriteSafetensors(path, SampleTensors());
  const auto size = std::filesystem::file_size(path);
  // The error when the file is cut to (or grown to) `length` bytes.
  const auto error_at = [&](std::uintmax_t length) {
    WriteSafetensors(path, SampleTensors());
    std::filesystem::resize_file(path, length);
    return ErrorOf([&] { ReadSafetensors(path); });
  };
  EXPECT_TRUE(ContainsAll(error_at(size - 1), {path, "data_offsets: end at byte", "(a truncated file?)"}));
  EXPECT_TRUE(ContainsAll(error_at(100), {path, "header of", "longer than the 92 bytes after its first 8"}));
  EXPECT_TRUE(ContainsAll(error_at(5), {path, "5 bytes, fewer than the 8"}));
  EXPECT_TRUE(ContainsAll(error_at(size + 4), {path, "4 bytes after the last tensor's"}));
  EXPECT_TRUE(ContainsAll(ErrorOf([&] { ReadSafetensors(dir.path()); }), {dir.path()}));
  EXPECT_TRUE(ContainsAll(ErrorOf([&] { ReadSafetensors(dir.path() + "/none.safetensors"); }), {"none.safetensors"}));
}

TEST(SafetensorsFile, RefusesDtypesTorchLacksAndBooleansOtherThanZeroOrOne) {
  ScratchDir dir("safetensors");
  const std::string u16 = RawFile(dir, "u16.safetensors", {{"w", SafetensorsDtype::kU16, {2}}}, "abcd");
  EXPECT_TRUE(ContainsAll(ErrorOf([&] { ReadSafetensors(u16); }), {"u16.safetensors: w: has dtype U16"}));
  const std::string mask =
      RawFile(dir, "bool.safetensors", {{"m", SafetensorsDtype::kBool, {3}}}, std::string("\x01\x02\x00", 3));
  EXPECT_TRUE(ContainsAll(ErrorOf([&] { ReadSafetensors(mask); }), {"m: holds a BOOL byte other than 0 or 1"}));
}

TEST(SafetensorsFile, RefusesToWriteWhatTheFormatCannotHold) {
  ScratchDir dir("safetensors");
  const std::string path = dir.path() + "/out.safetensors";
  EXPECT_TRUE(ContainsAll(ErrorOf([&] {
                            WriteSafetensors(path, {{"c", torch::zeros({2}, torch::kComplexFloat)}});
                          }),
                          {"c: has dtype ComplexFloat"}));
  EXPECT_TRUE(ContainsAll(ErrorOf([&] {
                            WriteSafetensors(path, {{"__metadata__", torch::zeros({2})}});
                          }),
                          {"__metadata__: cannot be a tensor's name"}));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A folder of two shards, a and b, and the index `index` (its JSON text).
void WriteShards(const ScratchDir& dir, const std::string& index) {
  WriteSafetensors(dir.path() + "/a.safetensors", {{"x", torch::ones({2})}, {"y", torch::zeros({3})}});
  WriteSafetensors(dir.path() + "/b.safetensors", {{"z", torch::arange(4)}});
  dir.Write("model.safetensors.index.json", index);
}

const std::string kIndex = R"({"metadata": {"total_size": 52},
  "weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}})";

TEST(HuggingFaceFolder, ReadsEveryShardTheIndexNames) {
  ScratchDir dir("hf");
  WriteShards(dir, kIndex);
  ExpectSame(ReadHuggingFaceFolder(dir.path()),
             {{"x", torch::ones({2})}, {"y", torch::zeros({3})}, {"z", torch::arange(4)}});
}

TEST(HuggingFaceFolder, ReadsOneFileBeforeAnIndex) {
  ScratchDir dir("hf");
  WriteShards(dir, kIndex);
  WriteSafetensors(dir.path() + "/model.safetensors", {{"w", torch::ones({1})}});
  ExpectSame(ReadHuggingFaceFolder(dir.path()), {{"w", torch::ones({1})}});
}

TEST(HuggingFaceFolder, RefusesShardsThatDisagreeWithTheIndex) {
  struct Case {
    std::string index;
    std::vector<std::string> error;
  };
  for (
      const Case& bad : std::vector<Case>{
          {R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "c.safetensors"}})",
           {"model.safetensors.index.json: weight_map.z: names the shard c.safetensors, which is not in"}},
          {R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors", "q": "b.safetensors"}})",
           {"weight_map.q: is not in its shard b.safetensors"}},
          {R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors"}})",
           {"a.safetensors: y: is in this shard, but model.safetensors.index.json puts it in b.safetensors"}},
          {R"({"weight_map": {"x": "a.safetensors", "z": "b.safetensors"}})",
           {"a.safetensors: y: is not in model.safetensors.index.json's weight_map"}},
          {R"({"weight_map": {"x": "../a.safetensors"}})", {"weight_map.x: must be the name of a shard file"}},
      }) {
    SCOPED_TRACE(bad.index);
    ScratchDir dir("hf");
    WriteShards(dir, bad.index);
    const std::string error = ErrorOf([&] { ReadHuggingFaceFolder(dir.path()); });
    for (const std::string& part : bad.error) EXPECT_TRUE(Contains(error, part));
  }
}

TEST(HuggingFaceFolder, RefusesATensorInTwoShards) {
  ScratchDir dir("hf");
  WriteShards(dir, kIndex);
  WriteSafetensors(dir.path() + "/b.safetensors", {{"z", torch::arange(4)}, {"x", torch::ones({2})}});
  EXPECT_TRUE(
      Contains(ErrorOf([&] { ReadHuggingFaceFolder(dir.path()); }),
               "b.safetensors: x: is in this shard, but model.safetensors.index.json puts it in a.safetensors"));
}

TEST(HuggingFaceFolder, RefusesAFolderWithoutWeights) {
  ScratchDir dir("hf");
  EXPECT_TRUE(ContainsAll(ErrorOf([&] { ReadHuggingFaceFolder(dir.path()); }),
                          {"holds neither model.safetensors nor model.safetensors.index.json"}));
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadHuggingFaceFolder(dir.path() + "/missing"); }), "is not a folder"));
}

}  // namespace
}  // namespace poplar::testing
