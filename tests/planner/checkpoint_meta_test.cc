// meta.json's adaptive batch record (planner/formats/checkpoint_meta.h): written and read
// back as it was; a sequence that does not add up, or out of order, is refused naming
// its key.
#include "planner/formats/checkpoint_meta.h"

#include <gtest/gtest.h>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using ::poplar::testing::Contains;

// A checkpoint of step 60 with `batch` as its "batch" object.
std::string MetaWith(const nlohmann::ordered_json& batch) {
  nlohmann::ordered_json meta = {{"format", kCheckpointFormat},
                                 {"step", 60},
                                 {"model", {{"arch", "gpt"}}},
                                 {"run", "354bb5596c527a4c"},
                                 {"line", nlohmann::ordered_json::array()}};
  TrainingRecipe recipe;
  recipe.global_batch = 48;
  recipe.precision = "fp32";
  recipe.data_tokens = 1000;
  meta["training"] = RecipeObject(recipe);
  if (!batch.is_null()) meta["batch"] = batch;
  return meta.dump(2);
}

std::string RefusalOf(const nlohmann::ordered_json& batch) {
  try {
    ParseCheckpointMeta(MetaWith(batch), "meta.json");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(CheckpointMeta, ABatchSequenceReadsBackAsWritten) {
  BatchRecord record;
  record.sequence = {{0, 48}, {20, 96}, {41, 64}};
  record.samples_done = 48 * 20 + 96 * 21 + 64 * 19;
  const CheckpointMeta meta = ParseCheckpointMeta(MetaWith(BatchObject(record)), "meta.json");
  ASSERT_TRUE(meta.batch);
  EXPECT_EQ(meta.batch->samples_done, record.samples_done);
  ASSERT_EQ(meta.batch->sequence.size(), 3u);
  EXPECT_EQ(meta.batch->sequence[1].from_step, 20);
  EXPECT_EQ(meta.batch->sequence[2].batch, 64);
  EXPECT_FALSE(ParseCheckpointMeta(MetaWith(nullptr), "meta.json").batch) << "absent: a fixed batch";
}

TEST(CheckpointMeta, RefusesABatchSequenceThatDoesNotAddUp) {
  const auto stretch = [](std::int64_t from, std::int64_t batch) {
    return nlohmann::ordered_json{{"from_step", from}, {"batch", batch}};
  };
  const auto with = [](nlohmann::ordered_json sequence, std::int64_t samples) {
    return nlohmann::ordered_json{{"sequence", std::move(sequence)}, {"samples_done", samples}};
  };
  EXPECT_EQ(RefusalOf(with({stretch(0, 48)}, 48 * 60)), "");
  EXPECT_TRUE(Contains(RefusalOf(with({stretch(0, 48)}, 48 * 59)),
                       "meta.json: batch.samples_done: is 2832 but the sequence's steps trained 2880"));
  EXPECT_TRUE(Contains(RefusalOf(with({stretch(1, 48)}, 48 * 59)), "batch.sequence[0].from_step"));
  EXPECT_TRUE(Contains(RefusalOf(with({stretch(0, 48), stretch(0, 96)}, 0)), "batch.sequence[1].from_step"));
  EXPECT_TRUE(Contains(RefusalOf(with({stretch(0, 48), stretch(60, 96)}, 48 * 60)), "batch.sequence[1].from_step"));
  EXPECT_TRUE(Contains(RefusalOf(with({stretch(0, 0)}, 0)), "batch.sequence[0].batch"));
  EXPECT_TRUE(Contains(RefusalOf(with({stretch(0, 2'000'000)}, 0)), "batch.sequence[0].batch"));
  EXPECT_TRUE(Contains(RefusalOf(with(nlohmann::ordered_json::array(), 0)), "batch.sequence"));
  EXPECT_TRUE(Contains(RefusalOf(with({7}, 0)), "batch.sequence[0]"));
  EXPECT_TRUE(Contains(RefusalOf({{"sequence", {stretch(0, 48)}}}), "batch.samples_done"));
  EXPECT_TRUE(
      Contains(RefusalOf({{"sequence", {stretch(0, 48)}}, {"samples_done", 2880}, {"first", 1}}), "batch.first"));
}

}  // namespace
}  // namespace poplar
