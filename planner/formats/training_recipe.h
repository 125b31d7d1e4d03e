// The training recipe: how a run trains, besides the model and the plan's split of the
// batch. A checkpoint records it (meta.json "training", docs/formats.md) so that a
// resume which would go on otherwise than the run that wrote it says so: a changed
// --lr, schedule, batch or token file is a different run from the one that never
// stopped, which the equivalence of a resume (docs/worker.md) is about.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/base/json_fields.h"
#include "planner/formats/adamw_options.h"

namespace poplar {

struct TrainingRecipe {
  AdamWOptions adamw;                  // its schedule resolved (ResolveLrSchedule)
  std::int64_t global_batch = 0;       // samples per optimizer step
  std::string precision;               // the worker's --precision: fp32 or bf16
  std::int64_t data_tokens = 0;        // the token file: its length and FNV-1a hash, which
  std::uint64_t data_fingerprint = 0;  // with the batch decide each step's samples
};

// One flat object, in this order: lr, warmup_steps, lr_decay, decay_steps and min_lr
// (when decaying), beta1, beta2, eps, weight_decay, grad_clip, global_batch, precision,
// data_tokens, data_fingerprint (16 hex digits).
nlohmann::ordered_json RecipeObject(const TrainingRecipe& recipe);

// RecipeObject's object back, as strictly as every JSON file poplar reads: each key
// present with its type and range, no other. Throws InputError naming fields' file and
// the key.
TrainingRecipe ReadRecipe(JsonFields& fields);

// What a run with recipe `now`, going on from a checkpoint trained with `recorded`
// after `step` steps, does otherwise, one phrase per setting: "lr: 0.0006 then, 0.0003
// now". When the learning rate of the next step differs, a last phrase gives both
// rates. Empty when the run goes on as the one that wrote the checkpoint would have.
std::vector<std::string> RecipeChanges(const TrainingRecipe& recorded, const TrainingRecipe& now, std::int64_t step);

}  // namespace poplar
