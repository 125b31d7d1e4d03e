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
  const GptConfig config = ParseModelConfig(
      R"({"arch": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 256, "block_size": 32})", kFile);
  EXPECT_EQ(config.n_layer, 2);
  EXPECT_EQ(config.n_head, 4);
  EXPECT_EQ(config.n_embd, 64);
  EXPECT_EQ(config.vocab_size, 256);
  EXPECT_EQ(config.block_size, 32);
}

TEST(ModelConfig, CountsGpt2SmallAsPublished) {
  // GPT-2 small, lm_head tied to wte: 124,439,808 parameters with position embeddings.
  const GptConfig config = ParseModelConfig(
      R"({"arch": "gpt", "n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "block_size": 1024})", kFile);
  EXPECT_EQ(config.ParameterCount(), 124439808);
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
  EXPECT_EQ(
      ParseError(R"({"arch": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 70000, "block_size": 32})")
          .key(),
      "vocab_size");
  EXPECT_EQ(
      ParseError(R"({"arch": "gpt", "n_layer": "2", "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32})")
          .key(),
      "n_layer");
  EXPECT_EQ(
      ParseError(R"({"arch": "llama", "n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "block_size": 32})")
          .key(),
      "arch");
}

TEST(ModelConfig, RejectsTextThatIsNotUtf8JsonAsAWholeFileError) {
  const InputError error = ParseError("{\"arch\": \"g\xff\xfe\"}");
  EXPECT_EQ(error.file(), kFile);
  EXPECT_EQ(error.key(), "");
  EXPECT_FALSE(error.reason().empty());
}

}  // namespace
}  // namespace poplar
