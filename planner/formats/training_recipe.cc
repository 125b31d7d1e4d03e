#include "planner/formats/training_recipe.h"

#include <cstdio>

namespace poplar {
namespace {

// The shortest text that reads back as `value` (nlohmann's), as meta.json shows it.
std::string Shown(const nlohmann::ordered_json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// A learning rate to 6 significant digits: 0.000452254.
std::string Rate(double rate) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", rate);
  return text;
}

}  // namespace

nlohmann::ordered_json RecipeObject(const TrainingRecipe& recipe) {
  const AdamWOptions& adamw = recipe.adamw;
  nlohmann::ordered_json object = {
      {"lr", adamw.lr}, {"warmup_steps", adamw.schedule.warmup_steps}, {"lr_decay", LrDecayName(adamw.schedule.decay)}};
  if (adamw.schedule.decay != LrDecay::kConstant) {
    object["decay_steps"] = adamw.schedule.decay_steps;
    object["min_lr"] = adamw.schedule.min_lr;
  }
  object["beta1"] = adamw.beta1;
  object["beta2"] = adamw.beta2;
  object["eps"] = adamw.eps;
  object["weight_decay"] = adamw.weight_decay;
  object["grad_clip"] = adamw.grad_clip;
  object["global_batch"] = recipe.global_batch;
  object["precision"] = recipe.precision;
  object["data_tokens"] = recipe.data_tokens;
  object["data_fingerprint"] = Hex64Text(recipe.data_fingerprint);
  return object;
}

TrainingRecipe ReadRecipe(JsonFields& fields) {
  TrainingRecipe recipe;
  AdamWOptions& adamw = recipe.adamw;
  adamw.lr = fields.Number("lr");
  if (!(adamw.lr > 0)) fields.Fail("lr", "must be more than 0");
  adamw.schedule.warmup_steps = fields.Integer("warmup_steps");
  if (adamw.schedule.warmup_steps < 0) fields.Fail("warmup_steps", "must be zero or more");
  const std::string decay = fields.String("lr_decay");
  const std::optional<LrDecay> named = LrDecayNamed(decay);
  if (!named) fields.Fail("lr_decay", "must be constant, cosine or linear, got '" + decay + "'");
  adamw.schedule.decay = *named;
  if (adamw.schedule.decay != LrDecay::kConstant) {
    adamw.schedule.decay_steps = fields.Integer("decay_steps");
    if (adamw.schedule.decay_steps <= adamw.schedule.warmup_steps) {
      fields.Fail("decay_steps", "must be more than warmup_steps");
    }
    adamw.schedule.min_lr = fields.Number("min_lr");
    if (!(adamw.schedule.min_lr >= 0 && adamw.schedule.min_lr <= adamw.lr)) {
      fields.Fail("min_lr", "must be from 0 to lr");
    }
  }
  adamw.beta1 = fields.Number("beta1");
  adamw.beta2 = fields.Number("beta2");
  adamw.eps = fields.Number("eps");
  adamw.weight_decay = fields.Number("weight_decay");
  adamw.grad_clip = fields.Number("grad_clip");
  recipe.global_batch = fields.Integer("global_batch");
  if (recipe.global_batch < 1) fields.Fail("global_batch", "must be 1 or more");
  recipe.precision = fields.String("precision");
  recipe.data_tokens = fields.Integer("data_tokens");
  if (recipe.data_tokens < 0) fields.Fail("data_tokens", "must be zero or more");
  recipe.data_fingerprint = fields.Hex64("data_fingerprint");
  fields.Finish();
  return recipe;
}

std::vector<std::string> RecipeChanges(const TrainingRecipe& recorded, const TrainingRecipe& now, std::int64_t step) {
  const nlohmann::ordered_json then_object = RecipeObject(recorded);
  const nlohmann::ordered_json now_object = RecipeObject(now);
  std::vector<std::string> changes;
  for (const auto& [key, value] : now_object.items()) {
    // decay_steps and min_lr are on one side only when lr_decay changed, which says so.
    const auto there = then_object.find(key);
    if (there == then_object.end() || *there == value) continue;
    changes.push_back(key + ": " + Shown(*there) + " then, " + Shown(value) + " now");
  }
  const double rate_then = LearningRateAt(recorded.adamw.schedule, recorded.adamw.lr, step + 1);
  const double rate_now = LearningRateAt(now.adamw.schedule, now.adamw.lr, step + 1);
  if (rate_then != rate_now) {
    changes.push_back("the learning rate of step " + std::to_string(step + 1) + ": " + Rate(rate_then) +
                      " on the schedule then, " + Rate(rate_now) + " now");
  }
  return changes;
}

}  // namespace poplar
