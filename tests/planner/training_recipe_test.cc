// The training recipe a checkpoint records (planner/formats/training_recipe.h): written and read
// back whole, read strictly, and compared with a resuming run's.
#include "planner/formats/training_recipe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

TrainingRecipe Cosine() {
  TrainingRecipe recipe;
  recipe.adamw.lr = 6e-4;
  recipe.adamw.schedule = {6, LrDecay::kCosine, 60, 6e-5};
  recipe.global_batch = 16;
  recipe.precision = "bf16";
  recipe.data_tokens = 6000;
  recipe.data_fingerprint = 0xfedcba9876543210ull;
  return recipe;
}

TrainingRecipe ReadBack(const nlohmann::json& object) {
  JsonFields fields(object, "meta.json", "training");
  return ReadRecipe(fields);
}

// The message of the InputError reading `object` throws; empty when it throws none.
std::string ReadError(const nlohmann::json& object) {
  return testing::ErrorOf([&] { ReadBack(object); });
}

TEST(TrainingRecipe, ReadsBackWhatItWrote) {
  const TrainingRecipe written = Cosine();
  const nlohmann::json object = RecipeObject(written);
  EXPECT_EQ(object["data_fingerprint"], "fedcba9876543210");
  EXPECT_EQ(object["lr_decay"], "cosine");
  const TrainingRecipe read = ReadBack(object);
  EXPECT_EQ(RecipeObject(read), RecipeObject(written));
  EXPECT_EQ(read.data_fingerprint, written.data_fingerprint);
  EXPECT_TRUE(RecipeChanges(read, written, 30).empty());

  // A constant rate records no decay_steps or min_lr, and reads back without them.
  TrainingRecipe constant = written;
  constant.adamw.schedule = {0, LrDecay::kConstant, 0, 0};
  EXPECT_FALSE(RecipeObject(constant).contains("decay_steps"));
  EXPECT_EQ(RecipeObject(ReadBack(RecipeObject(constant))), RecipeObject(constant));
}

TEST(TrainingRecipe, IsReadStrictly) {
  const nlohmann::json good = RecipeObject(Cosine());
  nlohmann::json unknown = good;
  unknown["momentum"] = 0.9;
  EXPECT_NE(ReadError(unknown).find("training.momentum"), std::string::npos) << ReadError(unknown);
  nlohmann::json missing = good;
  missing.erase("grad_clip");
  EXPECT_NE(ReadError(missing).find("training.grad_clip"), std::string::npos) << ReadError(missing);
  nlohmann::json fingerprint = good;
  fingerprint["data_fingerprint"] = "12345";
  EXPECT_NE(ReadError(fingerprint).find("16 hexadecimal digits"), std::string::npos) << ReadError(fingerprint);
  nlohmann::json decay = good;
  decay["decay_steps"] = 6;
  EXPECT_NE(ReadError(decay).find("more than warmup_steps"), std::string::npos) << ReadError(decay);
  nlohmann::json named = good;
  named["lr_decay"] = "exponential";
  EXPECT_NE(ReadError(named).find("constant, cosine or linear"), std::string::npos) << ReadError(named);
  nlohmann::json text = good;
  text["lr"] = "6e-4";
  EXPECT_NE(ReadError(text).find("training.lr"), std::string::npos) << ReadError(text);
}

// Each setting changed is named with both values, then the next step's two rates.
TEST(TrainingRecipe, ChangesNameEachSettingAndTheNextStepsRates) {
  const TrainingRecipe then = Cosine();
  TrainingRecipe now = then;
  now.adamw.lr = 3e-4;
  now.adamw.schedule.min_lr = 3e-5;
  now.adamw.schedule.decay_steps = 100;  // a longer run whose decay_steps followed --steps
  now.global_batch = 32;
  const std::vector<std::string> changes = RecipeChanges(then, now, 30);
  ASSERT_EQ(changes.size(), 5u);
  EXPECT_EQ(changes[0], "lr: 0.0006 then, 0.0003 now");
  EXPECT_EQ(changes[1], "decay_steps: 60 then, 100 now");
  EXPECT_EQ(changes[2], "min_lr: 6e-05 then, 3e-05 now");
  EXPECT_EQ(changes[3], "global_batch: 16 then, 32 now");
  EXPECT_EQ(changes[4].rfind("the learning rate of step 31: 0.000", 0), 0u) << changes[4];

  // Another token file, the rate the same: no rate phrase.
  TrainingRecipe data = then;
  data.data_fingerprint = 1;
  EXPECT_EQ(RecipeChanges(then, data, 30),
            std::vector<std::string>{"data_fingerprint: fedcba9876543210 then, 0000000000000001 now"});

  // From a constant rate to a decay: lr_decay says it; decay_steps and min_lr, on one
  // side only, are not listed apart.
  TrainingRecipe constant = then;
  constant.adamw.schedule = {0, LrDecay::kConstant, 0, 0};
  const std::vector<std::string> decaying = RecipeChanges(constant, then, 30);
  ASSERT_EQ(decaying.size(), 3u);
  EXPECT_EQ(decaying[0], "warmup_steps: 0 then, 6 now");
  EXPECT_EQ(decaying[1], "lr_decay: constant then, cosine now");
  EXPECT_EQ(decaying[2].rfind("the learning rate of step 31: 0.0006 on the schedule then, 0.000", 0), 0u)
      << decaying[2];
}

// The same rate at the next step, though the schedule differs later: the settings are
// still named (the run will differ), no rate phrase.
TEST(TrainingRecipe, AScheduleChangedOnlyLaterNamesItsSettingsAlone) {
  const TrainingRecipe then = Cosine();
  TrainingRecipe now = then;
  now.adamw.schedule.decay_steps = 100;
  EXPECT_EQ(RecipeChanges(then, now, 3), std::vector<std::string>{"decay_steps: 60 then, 100 now"});
}

}  // namespace
}  // namespace poplar
