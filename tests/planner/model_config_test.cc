// Tests of the model configuration file (planner/formats/model_config.h): what the worker, the
// agent and the head all accept, and the errors that name the file, key and reason.
#include "planner/formats/model_config.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::ContainsAll;

constexpr char kFile[] = "models/m.json";

// The InputError ParseModelConfig throws for `text`; fails the test if none.
InputError ParseError(const std::string& text) {
  try {
    ParseModelConfig(text, kFile);
    ADD_FAILURE() << "parsed without error: " << text;
  } catch (const InputError& error) {
    return error;
  }
  return InputError("<none>", "<none>", "<no error was thrown>");
}

TEST(ModelConfig, ParsesEveryField) {
  const ModelConfig config = ParseModelConfig(
      R"({"arch": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 256, "block_size": 32})", kFile);
  EXPECT_EQ(config.n_layer, 2);
  EXPECT_EQ(config.n_head, 4);
  EXPECT_EQ(config.n_embd, 64);
  EXPECT_EQ(config.vocab_size, 256);
  EXPECT_EQ(config.block_size, 32);
}

TEST(ModelConfig, CountsGpt2SmallAsPublished) {
  // GPT-2 small, lm_head tied to wte: 124,439,808 parameters with position embeddings.
  const ModelConfig config = ParseModelConfig(
      R"({"arch": "gpt", "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 1024})", kFile);
  EXPECT_EQ(config.ParameterCount(), 124439808);
}

// PaLM's accounting, as nanoGPT's estimate_mfu and scripts/gpu/gpu_runs.py count it: 6
// per multiplying parameter (GPT-2 small: 124,439,808 less 786,432 position embeddings)
// plus 12 · layers · block · width.
TEST(ModelConfig, CountsTrainingFlopsPerTokenAsPalm) {
  const ModelConfig gpt = ParseModelConfig(
      R"({"arch": "gpt", "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 1024})", kFile);
  EXPECT_DOUBLE_EQ(gpt.TrainingFlopsPerToken(), 6.0 * (124439808 - 786432) + 12.0 * 12 * 1024 * 768);
  const ModelConfig llama = ParseModelConfig(
      R"({"arch": "llama", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 256, "block_size": 32})", kFile);
  EXPECT_DOUBLE_EQ(llama.TrainingFlopsPerToken(), 6.0 * llama.ParameterCount() + 12.0 * 2 * 32 * 64);
}

TEST(ModelConfig, ShippedModelsParse) {
  for (const std::string name : {"gpt-tiny", "gpt-small", "gpt2-small", "gpt2-medium"}) {
    SCOPED_TRACE(name);
    EXPECT_GT(LoadModelConfig(std::string(POPLAR_SOURCE_DIR) + "/configs/models/" + name + ".json").ParameterCount(),
              0);
  }
}

TEST(ModelConfig, RejectsHeadsThatDoNotDivideTheWidth) {
  const InputError error =
      ParseError(R"({"arch": "gpt", "n_layer": 2, "n_head": 3, "n_embd": 64, "vocab_size": 256, "block_size": 32})");
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "n_embd");
  EXPECT_TRUE(ContainsAll(error.reason(), {"divisible", "n_head", "3"})) << error.reason();
}

TEST(ModelConfig, RejectsUnknownKeysWithTheNearestName) {
  const InputError error =
      ParseError(R"({"arch": "gpt", "n_layers": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32})");
  EXPECT_EQ(error.file(), kFile);
  EXPECT_TRUE(ContainsAll(std::string(error.what()), {"n_layer"})) << error.what();
}

TEST(ModelConfig, RejectsOutOfRangeAndWrongTypes) {
  EXPECT_EQ(
      ParseError(R"({"arch": "gpt", "n_layer": 0, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32})")
          .key(),
      "n_layer");
  EXPECT_EQ(ParseError(
                R"({"arch": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 20000000, "block_size": 32})")
                .key(),
            "vocab_size");
  EXPECT_EQ(
      ParseError(R"({"arch": "gpt", "n_layer": "2", "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32})")
          .key(),
      "n_layer");
  EXPECT_EQ(
      ParseError(R"({"arch": "mamba", "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32})")
          .key(),
      "arch");
}

TEST(ModelConfig, ReadsALlamaWithHuggingFacesDefaults) {
  const ModelConfig config = ParseModelConfig(
      R"({"arch": "llama", "n_layer": 2, "n_head": 4, "n_embd": 96, "vocab_size": 300, "block_size": 32})", kFile);
  EXPECT_EQ(config.arch, Architecture::kLlama);
  EXPECT_EQ(config.n_kv_head, 4);
  EXPECT_EQ(config.intermediate_size, 256);  // 8/3 * 96 = 256
  EXPECT_EQ(config.rope_theta, 10000.0);
  EXPECT_EQ(config.norm_eps, 1e-6);
  EXPECT_FALSE(config.tie_embeddings);
  // Embedding and head, per layer q o (2 c^2), k v (2 c kv), 3 c i, two norms; the final norm.
  EXPECT_EQ(config.ParameterCount(), 2 * 300 * 96 + 2 * (2 * 96 * 96 + 2 * 96 * 96 + 3 * 96 * 256 + 2 * 96) + 96);
  // Written with every key resolved, and read back the same.
  EXPECT_EQ(ParseModelConfig(ModelConfigJson(config), kFile), config);
  EXPECT_NE(ModelConfigJson(config).find("\"n_kv_head\":4"), std::string::npos);
}

TEST(ModelConfig, ChecksTheLlamaKeys) {
  const std::string base = R"({"arch": "llama", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 256, )"
                           R"("block_size": 32, )";
  EXPECT_EQ(ParseError(base + R"("n_kv_head": 3})").key(), "n_kv_head");
  EXPECT_EQ(ParseError(base + R"("rope_theta": 0})").key(), "rope_theta");
  EXPECT_EQ(ParseError(base + R"("norm_eps": -1})").key(), "norm_eps");
  EXPECT_EQ(ParseError(base + R"("tie_embeddings": 1})").key(), "tie_embeddings");
  EXPECT_EQ(ParseError(base + R"("intermediate_size": 0})").key(), "intermediate_size");
  // A GPT has none of them.
  EXPECT_EQ(ParseError(R"({"arch": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 256, )"
                       R"("block_size": 32, "n_kv_head": 2})")
                .key(),
            "n_kv_head");
  // Odd heads cannot rotate.
  EXPECT_EQ(ParseError(R"({"arch": "llama", "n_layer": 2, "n_head": 4, "n_embd": 36, "vocab_size": 256, )"
                       R"("block_size": 32})")
                .key(),
            "n_embd");
}

TEST(ModelConfig, RejectsTextThatIsNotUtf8JsonAsAWholeFileError) {
  const InputError error = ParseError("{\"arch\": \"g\xff\xfe\"}");
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "");
  EXPECT_FALSE(error.reason().empty());
}

}  // namespace
}  // namespace poplar
