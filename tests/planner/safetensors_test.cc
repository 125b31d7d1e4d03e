// Tests of Hugging Face's files as poplar reads them (planner/formats/safetensors.h): a
// safetensors header, the index of a sharded model and config.json, each malformed case
// refused naming the file, the tensor or key, and the reason.
#include "planner/formats/safetensors.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/formats/hf_config.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::ContainsAll;

constexpr char kFile[] = "model.safetensors";

// The 8-byte prefix of a header of `size` bytes.
std::string Prefix(std::uint64_t size) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((size >> (8 * i)) & 0xff);
  return bytes;
}

// The header `json` parsed as that of a file with `data` bytes of tensor data.
SafetensorsHeader Parse(const std::string& json, std::uint64_t data) {
  return ParseSafetensorsHeader(json, 8 + json.size() + data, kFile);
}

// The InputError `read` throws; fails the test if none.
InputError ThrownBy(const std::function<void()>& read) {
  try {
    read();
    ADD_FAILURE() << "read without error";
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

InputError HeaderError(const std::string& json, std::uint64_t data) {
  return ThrownBy([&] { Parse(json, data); });
}

// A header of one F32 tensor "w" with `entry` as its entry.
std::string OneTensor(const std::string& entry) { return R"({"w": )" + entry + "}"; }

TEST(Safetensors, ParsesEntriesInFileOrderWithMetadata) {
  const SafetensorsHeader header = Parse(
      R"({"__metadata__": {"format": "pt"},
          "b": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
          "a": {"dtype": "I64", "shape": [], "data_offsets": [12, 20]},
          "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [20, 20]}}   )",
      20);
  ASSERT_EQ(header.entries.size(), 3u);
  EXPECT_EQ(header.entries[0].name, "b");
  EXPECT_EQ(header.entries[0].dtype, SafetensorsDtype::kBF16);
  EXPECT_EQ(header.entries[0].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(header.entries[0].offset, 8 + header.header_size);
  EXPECT_EQ(header.entries[0].length, 12u);
  EXPECT_EQ(header.entries[1].name, "a");
  EXPECT_TRUE(header.entries[1].shape.empty());
  EXPECT_EQ(header.entries[1].offset, 8 + header.header_size + 12);
  EXPECT_EQ(header.entries[2].length, 0u);
  EXPECT_EQ(header.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(Safetensors, KnowsEveryWholeByteDtype) {
  for (const auto& [name, size] : std::vector<std::pair<std::string, int>>{{"BOOL", 1},
                                                                           {"U8", 1},
                                                                           {"I8", 1},
                                                                           {"F8_E5M2", 1},
                                                                           {"F8_E4M3", 1},
                                                                           {"I16", 2},
                                                                           {"U16", 2},
                                                                           {"F16", 2},
                                                                           {"BF16", 2},
                                                                           {"I32", 4},
                                                                           {"U32", 4},
                                                                           {"F32", 4},
                                                                           {"I64", 8},
                                                                           {"U64", 8},
                                                                           {"F64", 8}}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(SafetensorsDtypeFromName(name));
    EXPECT_EQ(SafetensorsDtypeSize(*SafetensorsDtypeFromName(name)), size);
    EXPECT_EQ(SafetensorsDtypeName(*SafetensorsDtypeFromName(name)), name);
  }
  EXPECT_FALSE(SafetensorsDtypeFromName("F4"));
  EXPECT_FALSE(SafetensorsDtypeFromName("f32"));
}

TEST(Safetensors, HeaderSizeComesFromTheFirstEightBytesLittleEndian) {
  EXPECT_EQ(SafetensorsHeaderSize(Prefix(0x0102), 8 + 0x0102, kFile), 0x0102u);
  const InputError shorter = ThrownBy([] { SafetensorsHeaderSize(std::string("\x02\x00", 2), 2, kFile); });
  EXPECT_EQ(shorter.file(), kFile);
  EXPECT_TRUE(ContainsAll(shorter.reason(), {"2 bytes", "fewer than the 8"}));
  const InputError beyond = ThrownBy([] { SafetensorsHeaderSize(Prefix(100), 50, kFile); });
  EXPECT_TRUE(ContainsAll(beyond.reason(), {"header of 100 bytes", "longer than the 42 bytes"}));
  const InputError huge = ThrownBy([] { SafetensorsHeaderSize(Prefix(100'000'001), 1ull << 40, kFile); });
  EXPECT_TRUE(ContainsAll(huge.reason(), {"100000001", "more than the 100000000 allowed"}));
  const InputError wrapped = ThrownBy([] { SafetensorsHeaderSize(Prefix(~0ull), 1ull << 40, kFile); });
  EXPECT_TRUE(ContainsAll(wrapped.reason(), {"18446744073709551615", "more than"}));
}

TEST(Safetensors, RefusesAHeaderThatIsNotAJsonObject) {
  EXPECT_TRUE(ContainsAll(HeaderError("{\"w\": ", 0).reason(), {"not valid JSON"}));
  EXPECT_TRUE(ContainsAll(HeaderError("[1, 2]", 0).reason(), {"must be a JSON object"}));
  EXPECT_TRUE(ContainsAll(HeaderError("{\"\xff\": 1}", 0).reason(), {"not valid JSON"}));  // not UTF-8
  const InputError twice = HeaderError(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                           "w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                                       2);
  EXPECT_EQ(twice.key(), "w");
  EXPECT_TRUE(ContainsAll(twice.reason(), {"more than once"}));
}

TEST(Safetensors, RefusesMalformedEntriesNamingTheTensorAndKey) {
  struct Case {
    std::string entry;
    std::uint64_t data;
    std::string key;
    std::string reason;
  };
  for (const Case& bad : std::vector<Case>{
           {"[1]", 0, "w", "must be an object"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1})", 4, "w.extra", "unknown key"},
           {R"({"dtype": "F4", "shape": [1], "data_offsets": [0, 1]})", 1, "w.dtype", "must be one of BOOL"},
           {R"({"dtype": 4, "shape": [1], "data_offsets": [0, 4]})", 4, "w.dtype", "must be a string"},
           {R"({"shape": [1], "data_offsets": [0, 4]})", 4, "w.dtype", "is required"},
           {R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})", 4, "w.shape", "integers from 0"},
           {R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})", 4, "w.shape", "integers from 0"},
           {R"({"dtype": "F32", "shape": 4, "data_offsets": [0, 4]})", 4, "w.shape", "a list of sizes"},
           {R"({"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 4]})", 4, "w.shape",
            "integers from 0 to 9223372036854775807"},
           {R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]})", 4, "w.shape",
            "more bytes than 64 bits"},
           {R"({"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 4]})", 4, "w.shape",
            "more bytes than 64 bits"},
           {R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})", 4, "w.data_offsets",
            "hold 4 bytes, but 2 elements of F32 are 8"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]})", 4, "w.data_offsets", "must not begin after"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})", 4, "w.data_offsets", "two byte offsets"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]})", 4, "w.data_offsets", "two byte offsets"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})", 4, "w.data_offsets", "two byte offsets"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 3, "w.data_offsets",
            "end at byte 4, beyond the data region's 3 bytes"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 6, "", "2 bytes after the last tensor's"},
           {R"({"dtype": "F32", "shape": [1], "data_offsets": [2, 6]})", 6, "w",
            "the bytes between belong to no tensor"},
       }) {
    SCOPED_TRACE(bad.entry);
    const InputError error = HeaderError(OneTensor(bad.entry), bad.data);
    EXPECT_EQ(error.file(), kFile);
    EXPECT_EQ(error.key(), bad.key);
    EXPECT_TRUE(ContainsAll(error.reason(), {bad.reason}));
  }
}

TEST(Safetensors, RefusesOverlappingTensorsAndHolesBetweenThem) {
  const InputError overlap = HeaderError(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                             "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
                                         6);
  EXPECT_EQ(overlap.key(), "b");
  EXPECT_TRUE(ContainsAll(overlap.reason(), {"overlap those of a"}));
  // An empty tensor inside another's bytes overlaps them too, as the safetensors library says.
  const InputError inside = HeaderError(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                            "b": {"dtype": "U8", "shape": [0], "data_offsets": [2, 2]}})",
                                        4);
  EXPECT_EQ(inside.key(), "b");
  const InputError hole = HeaderError(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                                          "b": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}})",
                                      5);
  EXPECT_EQ(hole.key(), "b");
  EXPECT_TRUE(ContainsAll(hole.reason(), {"begins at byte 3", "end at byte 2", "no holes"}));
}

TEST(Safetensors, RefusesMetadataOtherThanStrings) {
  const InputError list = HeaderError(R"({"__metadata__": [1]})", 0);
  EXPECT_EQ(list.key(), "__metadata__");
  const InputError number = HeaderError(R"({"__metadata__": {"format": "pt", "step": 3}})", 0);
  EXPECT_EQ(number.key(), "__metadata__.step");
  EXPECT_TRUE(ContainsAll(number.reason(), {"must be a string"}));
}

TEST(Safetensors, RefusesATensorWithoutAName) {
  const InputError error = HeaderError(R"({"": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}})", 0);
  EXPECT_TRUE(ContainsAll(error.reason(), {"empty string"}));
}

TEST(Safetensors, HeaderBytesRoundTripThroughTheParser) {
  const std::vector<SafetensorsTensor> tensors = {{"z.weight", SafetensorsDtype::kF16, {3, 5}},
                                                  {"a.bias", SafetensorsDtype::kF64, {}},
                                                  {"empty", SafetensorsDtype::kI32, {0}},
                                                  {"mask", SafetensorsDtype::kBool, {7}}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const std::string bytes = SafetensorsHeaderBytes(tensors, metadata);
  EXPECT_EQ(bytes.size() % 8, 0u);
  const std::uint64_t data = 30 + 8 + 0 + 7;
  const std::uint64_t size = SafetensorsHeaderSize(bytes.substr(0, 8), bytes.size() + data, kFile);
  EXPECT_EQ(size, bytes.size() - 8);
  const SafetensorsHeader header = ParseSafetensorsHeader(bytes.substr(8), bytes.size() + data, kFile);
  ASSERT_EQ(header.entries.size(), tensors.size());
  std::uint64_t offset = bytes.size();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(header.entries[i].name, tensors[i].name);
    EXPECT_EQ(header.entries[i].dtype, tensors[i].dtype);
    EXPECT_EQ(header.entries[i].shape, tensors[i].shape);
    EXPECT_EQ(header.entries[i].offset, offset);
    offset += header.entries[i].length;
  }
  EXPECT_EQ(header.metadata, metadata);
  EXPECT_EQ(SafetensorsHeaderBytes({}, {}).size(), 16u);  // "{}" padded to 8
}

TEST(Safetensors, HeaderBytesRefuseNamesAFileCannotHold) {
  EXPECT_THROW(SafetensorsHeaderBytes({{"__metadata__", SafetensorsDtype::kU8, {1}}}, {}), std::invalid_argument);
  EXPECT_THROW(SafetensorsHeaderBytes({{"", SafetensorsDtype::kU8, {1}}}, {}), std::invalid_argument);
  EXPECT_THROW(SafetensorsHeaderBytes({{"a", SafetensorsDtype::kU8, {1}}, {"a", SafetensorsDtype::kU8, {1}}}, {}),
               std::invalid_argument);
  EXPECT_THROW(SafetensorsHeaderBytes({{"a\xff", SafetensorsDtype::kU8, {1}}}, {}), std::invalid_argument);
  EXPECT_THROW(SafetensorsHeaderBytes({{"a", SafetensorsDtype::kU8, {-1}}}, {}), std::invalid_argument);
}

TEST(SafetensorsIndex, MapsTensorsToShards) {
  const auto shards = ParseSafetensorsIndex(R"({"metadata": {"total_size": 24},
      "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})",
                                            "model.safetensors.index.json");
  EXPECT_EQ(shards, (std::map<std::string, std::string>{{"a", "model-00001-of-00002.safetensors"},
                                                        {"b", "model-00002-of-00002.safetensors"}}));
}

TEST(SafetensorsIndex, RefusesShardsOutsideItsFolderAndOtherKeys) {
  constexpr char kIndex[] = "model.safetensors.index.json";
  const auto error = [&](const std::string& text) { return ThrownBy([&] { ParseSafetensorsIndex(text, kIndex); }); };
  for (const std::string shard : {"../x.safetensors", "/etc/passwd", "a/b.safetensors", "..", ""}) {
    SCOPED_TRACE(shard);
    const InputError bad = error(R"({"weight_map": {"w": ")" + shard + R"("}})");
    EXPECT_EQ(bad.file(), kIndex);
    EXPECT_EQ(bad.key(), "weight_map.w");
    EXPECT_TRUE(ContainsAll(bad.reason(), {"shard file in the index's folder"}));
  }
  EXPECT_EQ(error(R"({"weight_map": {"w": 3}})").key(), "weight_map.w");
  EXPECT_EQ(error(R"({"weight_map": {}})").key(), "weight_map");
  EXPECT_EQ(error(R"({"metadata": {}})").key(), "weight_map");
  EXPECT_EQ(error(R"({"metadata": 3, "weight_map": {"w": "a"}})").key(), "metadata");
  EXPECT_EQ(error(R"({"weight_map": {"w": "a"}, "weights": {}})").key(), "weights");
  EXPECT_EQ(error(R"({"weight_map": {"w": "a", "w": "b"}})").key(), "weight_map.w");
}

constexpr char kConfig[] = "gpt2/config.json";

InputError ConfigError(const std::string& text) {
  return ThrownBy([&] { ModelConfigFromHuggingFace(text, kConfig); });
}

// GPT-2 small's config.json as Transformers writes it.
const std::string kGpt2 = R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
  "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024,
  "n_embd": 768, "n_head": 12, "n_inner": null, "n_layer": 12, "n_positions": 1024,
  "resid_pdrop": 0.1, "summary_activation": null, "task_specific_params": {"text-generation": {"max_length": 50}},
  "vocab_size": 50257})";

// A small Llama's, with Transformers' usual keys.
const std::string kLlama = R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
  "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64,
  "initializer_range": 0.02, "intermediate_size": 172, "max_position_embeddings": 128, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0,
  "tie_word_embeddings": true, "torch_dtype": "float32", "transformers_version": "4.44.0", "use_cache": true,
  "vocab_size": 256})";

// `text` with `from` (which it holds) replaced by `to`.
std::string With(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(HuggingFaceConfig, ReadsGpt2) {
  const ModelConfig config = ModelConfigFromHuggingFace(kGpt2, kConfig);
  EXPECT_EQ(config.arch, Architecture::kGpt);
  EXPECT_EQ(config.n_layer, 12);
  EXPECT_EQ(config.n_head, 12);
  EXPECT_EQ(config.n_embd, 768);
  EXPECT_EQ(config.vocab_size, 50257);
  EXPECT_EQ(config.block_size, 1024);
  EXPECT_EQ(config.ParameterCount(), 124439808);
  EXPECT_EQ(ModelConfigFromHuggingFace(With(kGpt2, "\"gelu_new\"", "\"gelu\""), kConfig), config);
}

TEST(HuggingFaceConfig, ReadsLlamaWithItsDefaults) {
  const ModelConfig config = ModelConfigFromHuggingFace(kLlama, kConfig);
  EXPECT_EQ(config.arch, Architecture::kLlama);
  EXPECT_EQ(config.n_layer, 2);
  EXPECT_EQ(config.n_head, 4);
  EXPECT_EQ(config.n_kv_head, 2);
  EXPECT_EQ(config.n_embd, 64);
  EXPECT_EQ(config.intermediate_size, 172);
  EXPECT_EQ(config.vocab_size, 256);
  EXPECT_EQ(config.block_size, 128);
  EXPECT_EQ(config.rope_theta, 500000.0);
  EXPECT_EQ(config.norm_eps, 1e-5);
  EXPECT_TRUE(config.tie_embeddings);
  const std::string bare = R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
    "hidden_size": 64, "intermediate_size": 172, "vocab_size": 256, "max_position_embeddings": 128,
    "num_key_value_heads": null})";
  const ModelConfig defaults = ModelConfigFromHuggingFace(bare, kConfig);
  EXPECT_EQ(defaults.n_kv_head, 4);
  EXPECT_EQ(defaults.rope_theta, 10000.0);
  EXPECT_EQ(defaults.norm_eps, 1e-6);
  EXPECT_FALSE(defaults.tie_embeddings);
}

TEST(HuggingFaceConfig, RefusesWhatWouldChangeTheModel) {
  struct Case {
    std::string text;
    std::string key;
    std::string reason;
  };
  for (const Case& bad : std::vector<Case>{
           {With(kLlama, R"("rope_scaling": null)", R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"),
            "rope_scaling", "must be null"},
           {With(kLlama, R"("attention_bias": false)", R"("attention_bias": true)"), "attention_bias", "biases"},
           {With(kLlama, R"("mlp_bias": false)", R"("mlp_bias": true)"), "mlp_bias", "biases in the MLP"},
           {With(kLlama, R"("hidden_act": "silu")", R"("hidden_act": "gelu")"), "hidden_act", "must be \"silu\""},
           {With(kLlama, R"("pretraining_tp": 1)", R"("head_dim": 32)"), "head_dim",
            "must be hidden_size / num_attention_heads (16), got 32"},
           {With(kGpt2, R"("activation_function": "gelu_new")", R"("activation_function": "relu")"),
            "activation_function", "must be \"gelu_new\" or \"gelu\""},
           {With(kGpt2, R"("n_inner": null)", R"("n_inner": 1024)"), "n_inner", "must be 4 n_embd (3072)"},
           {With(kGpt2, R"("layer_norm_epsilon": 1e-05)", R"("layer_norm_epsilon": 1e-06)"), "layer_norm_epsilon",
            "must be 1e-05"},
           {With(kGpt2, R"("n_ctx": 1024)", R"("scale_attn_by_inverse_layer_idx": true)"),
            "scale_attn_by_inverse_layer_idx", "is true"},
           {With(kGpt2, R"("model_type": "gpt2")", R"("model_type": "mistral")"), "model_type",
            "must be \"gpt2\" or \"llama\""},
       }) {
    SCOPED_TRACE(bad.key);
    const InputError error = ConfigError(bad.text);
    EXPECT_EQ(error.file(), kConfig);
    EXPECT_EQ(error.key(), bad.key);
    EXPECT_TRUE(ContainsAll(error.reason(), {bad.reason}));
  }
  // The same head size written out is no change.
  EXPECT_NO_THROW(ModelConfigFromHuggingFace(With(kLlama, R"("pretraining_tp": 1)", R"("head_dim": 16)"), kConfig));
}

TEST(HuggingFaceConfig, RangeErrorsNameTheTransformersKeys) {
  struct Case {
    std::string text;
    std::string key;
    std::string reason;
  };
  for (const Case& bad : std::vector<Case>{
           {With(kLlama, R"("num_hidden_layers": 2)", R"("num_hidden_layers": 0)"), "num_hidden_layers",
            "from 1 to 1000, got 0"},
           {With(kLlama, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 3)"), "num_key_value_heads",
            "must divide num_attention_heads (4)"},
           {With(kLlama, R"("hidden_size": 64)", R"("hidden_size": 65)"), "hidden_size",
            "divisible by num_attention_heads"},
           {With(kLlama, R"("max_position_embeddings": 128,)", ""), "max_position_embeddings", "is required"},
           {With(kLlama, R"("intermediate_size": 172,)", ""), "intermediate_size", "is required"},
           {With(kLlama, R"("rms_norm_eps": 1e-05)", R"("rms_norm_eps": "small")"), "rms_norm_eps", "must be a number"},
           {With(kLlama, R"("tie_word_embeddings": true)", R"("tie_word_embeddings": 1)"), "tie_word_embeddings",
            "must be true or false"},
           {With(kGpt2, R"("n_positions": 1024)", R"("n_positions": 0)"), "n_positions", "got 0"},
           {With(kGpt2, R"("n_embd": 768)", R"("n_embd": "768")"), "n_embd", "must be an integer"},
           {With(kGpt2, R"("model_type": "gpt2", )", ""), "model_type", "is required"},
       }) {
    SCOPED_TRACE(bad.key);
    const InputError error = ConfigError(bad.text);
    EXPECT_EQ(error.key(), bad.key);
    EXPECT_TRUE(ContainsAll(error.reason(), {bad.reason}));
  }
  EXPECT_EQ(ConfigError(kGpt2 + "x").key(), "");
  EXPECT_EQ(ConfigError(With(kGpt2, R"("n_ctx": 1024)", R"("n_head": 12)")).key(), "n_head");  // twice
}

}  // namespace
}  // namespace poplar
