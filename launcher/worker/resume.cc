#include "launcher/worker/resume.h"

#include <exception>
#include <iostream>
#include <vector>

#include "launcher/worker/checkpoint.h"
#include "planner/base/command_failed.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"

namespace poplar {
namespace {

// Warns, on the rank that read the checkpoint, when this run goes on otherwise than the
// one that wrote it (RecipeChanges): a changed --lr or schedule, batch or token file is
// often meant (a lower rate after a loss spike, more steps), never silent. The head
// shows worker warnings (LaunchMonitor::Output). The batch of a checkpoint with an
// adaptive batch's sequence changes by design: the sequence goes on.
void WarnOfRecipeChanges(const RestoredCheckpoint& checkpoint, const TrainingRecipe& recipe, const std::string& path,
                         int rank) {
  TrainingRecipe recorded = checkpoint.training;
  if (checkpoint.batch) recorded.global_batch = recipe.global_batch;
  const std::vector<std::string> changes = RecipeChanges(recorded, recipe, checkpoint.step);
  if (changes.empty()) return;
  std::cerr << "poplar-worker[rank " << rank << "]: warning: --resume " << path << ": this run goes on from step "
            << checkpoint.step << " otherwise than the run that wrote it: " << Join(changes, "; ") << std::endl;
}

// `values` of rank `source` on every rank (the others' `values` are not read): their
// count, then the values.
std::vector<std::int64_t> BroadcastLongs(Communicator& communicator, const std::vector<std::int64_t>& values,
                                         int source, torch::Device device) {
  const auto longs = torch::TensorOptions(torch::kLong);
  const bool sending = communicator.rank() == source;
  auto count = torch::tensor({sending ? static_cast<std::int64_t>(values.size()) : std::int64_t{0}}, longs).to(device);
  communicator.Broadcast(count, source);
  const std::int64_t size = count.cpu().item<std::int64_t>();
  if (size == 0) return {};
  auto sent = (sending ? torch::tensor(values, longs) : torch::zeros({size}, longs)).to(device);
  communicator.Broadcast(sent, source);
  sent = sent.cpu();
  return std::vector<std::int64_t>(sent.data_ptr<std::int64_t>(), sent.data_ptr<std::int64_t>() + size);
}

// Sends `line` from rank `source` to every rank (rank 0, which writes checkpoints, may
// not hold the one the job resumed from): its run id, then each ancestor's run id (as
// their bits) and step.
CheckpointLine BroadcastLine(Communicator& communicator, const CheckpointLine& line, int source, torch::Device device) {
  std::vector<std::int64_t> values = {static_cast<std::int64_t>(line.run)};
  for (const auto& ancestor : line.ancestors) {
    values.push_back(static_cast<std::int64_t>(ancestor.run));
    values.push_back(ancestor.step);
  }
  const std::vector<std::int64_t> sent = BroadcastLongs(communicator, values, source, device);
  CheckpointLine received{static_cast<std::uint64_t>(sent.at(0)), {}};
  for (std::size_t i = 1; i + 1 < sent.size(); i += 2) {
    received.ancestors.push_back({static_cast<std::uint64_t>(sent[i]), sent[i + 1]});
  }
  return received;
}

// The source's adaptive batch record (the checkpoint's) on every rank: samples_done, then
// each stretch's first step and batch (nothing: no record).
std::optional<BatchRecord> BroadcastBatch(Communicator& communicator, const std::optional<BatchRecord>& record,
                                          int source, torch::Device device) {
  std::vector<std::int64_t> values;
  if (record) {
    values.push_back(record->samples_done);
    for (const BatchStretch& stretch : record->sequence) {
      values.push_back(stretch.from_step);
      values.push_back(stretch.batch);
    }
  }
  const std::vector<std::int64_t> sent = BroadcastLongs(communicator, values, source, device);
  if (sent.empty()) return std::nullopt;
  BatchRecord received;
  received.samples_done = sent[0];
  for (std::size_t i = 1; i + 1 < sent.size(); i += 2) received.sequence.push_back({sent[i], sent[i + 1]});
  return received;
}

// The source's loss scale record (the checkpoint's) on every rank.
std::optional<LossScaleRecord> BroadcastLossScale(Communicator& communicator,
                                                  const std::optional<LossScaleRecord>& record, int source,
                                                  torch::Device device) {
  const bool has = record.has_value();
  auto sent = torch::tensor(
                  {has ? 1.0 : 0.0, has ? record->scale : 0.0, has ? static_cast<double>(record->growth_tracker) : 0.0,
                   has ? static_cast<double>(record->optimizer_steps) : 0.0},
                  torch::TensorOptions(torch::kFloat64))
                  .to(device);
  communicator.Broadcast(sent, source);
  sent = sent.cpu();
  if (sent[0].item<double>() == 0) return std::nullopt;
  return LossScaleRecord{sent[1].item<double>(), static_cast<std::int64_t>(sent[2].item<double>()),
                         static_cast<std::int64_t>(sent[3].item<double>())};
}

}  // namespace

std::optional<Resumed> ResumeFromNewestCheckpoint(Communicator& communicator, Decoder& model, const std::string& resume,
                                                  std::int64_t steps, const ModelConfig& config,
                                                  const TrainingRecipe& recipe, torch::Device device) {
  const int world_size = communicator.world_size();
  constexpr std::int64_t kNoCheckpoint = -1;
  constexpr std::int64_t kUnreadable = -2;
  torch::NoGradGuard no_grad;
  std::exception_ptr own_error;
  std::int64_t own_step = kNoCheckpoint;
  if (!resume.empty()) {
    try {
      own_step = CheckpointStep(resume, config);
    } catch (const std::exception&) {
      own_error = std::current_exception();
      own_step = kUnreadable;
    }
  }
  auto own = torch::tensor({own_step}, torch::TensorOptions(torch::kLong)).to(device);
  auto newest = torch::empty({world_size}, torch::TensorOptions(torch::kLong)).to(device);
  communicator.AllGather(own, newest);
  newest = newest.cpu();
  if (own_error) std::rethrow_exception(own_error);
  int source = 0;
  for (int r = 0; r < world_size; ++r) {
    if (newest[r].item<std::int64_t>() == kUnreadable) {
      throw PeerFailure("rank " + std::to_string(r) + " cannot read its --resume checkpoint (its error says why)");
    }
    if (newest[r].item<std::int64_t>() > newest[source].item<std::int64_t>()) source = r;
  }
  const std::int64_t step = newest[source].item<std::int64_t>();
  if (step == kNoCheckpoint) return std::nullopt;
  if (step > steps) {
    throw InputError("--steps", "",
                     std::to_string(steps) + " is below the step of the newest checkpoint (" + std::to_string(step) +
                         ", rank " + std::to_string(source) + "'s)");
  }

  // The source reads the tensors and says whether it could, before any is sent.
  std::optional<RestoredCheckpoint> checkpoint;
  if (communicator.rank() == source) {
    try {
      checkpoint = RestoreCheckpoint(resume, config, model);
      if (checkpoint->step != step) {
        throw InputError(resume, "",
                         "changed while the job started (step " + std::to_string(step) + ", now " +
                             std::to_string(checkpoint->step) + ")");
      }
      WarnOfRecipeChanges(*checkpoint, recipe, resume, communicator.rank());
    } catch (const std::exception&) {
      own_error = std::current_exception();
    }
  }
  auto readable = torch::tensor({own_error ? std::int64_t{0} : 1}, torch::TensorOptions(torch::kLong)).to(device);
  communicator.Broadcast(readable, source);
  if (own_error) std::rethrow_exception(own_error);
  if (readable.cpu().item<std::int64_t>() == 0) {
    throw PeerFailure("rank " + std::to_string(source) + ", which holds the newest checkpoint (step " +
                      std::to_string(step) + "), cannot read it (its error says why)");
  }
  Resumed resumed;
  resumed.step = step;
  resumed.source = source;
  resumed.line = BroadcastLine(communicator, checkpoint ? checkpoint->line : CheckpointLine{}, source, device);
  resumed.loss_scale =
      BroadcastLossScale(communicator, checkpoint ? checkpoint->loss_scale : std::nullopt, source, device);
  resumed.batch = BroadcastBatch(communicator, checkpoint ? checkpoint->batch : std::nullopt, source, device);
  for (auto& [name, parameter] : model->NamedParameters()) {
    auto value = parameter.detach();  // the source's holds the checkpoint's already
    communicator.Broadcast(value, source);
    resumed.parameters.emplace_back(name, value.sizes().vec());
  }
  if (checkpoint) resumed.moments = std::move(checkpoint->moments);
  return resumed;
}

void SendResumedMoments(Communicator& communicator, TrainingEngine& engine, Resumed& resumed, torch::Device device) {
  torch::NoGradGuard no_grad;
  const auto fp32 = torch::TensorOptions(torch::kFloat32).device(device);
  for (const auto& [name, shape] : resumed.parameters) {
    AdamMoments moment;
    if (const auto loaded = resumed.moments.find(name); loaded != resumed.moments.end()) {
      moment = {loaded->second.exp_avg.to(fp32), loaded->second.exp_avg_sq.to(fp32)};
      resumed.moments.erase(loaded);
    } else {
      moment = {torch::empty(shape, fp32), torch::empty(shape, fp32)};  // the collectives fill them
    }
    communicator.Broadcast(moment.exp_avg, resumed.source);
    communicator.Broadcast(moment.exp_avg_sq, resumed.source);
    engine.LoadMoments({{name, moment}}, resumed.loss_scale ? resumed.loss_scale->optimizer_steps : resumed.step);
  }
}

}  // namespace poplar
