#include "launcher/worker/train.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "launcher/comm/communicator.h"
#include "launcher/device/device.h"
#include "launcher/device/emulated_slowdown.h"
#include "launcher/model/decoder.h"
#include "launcher/model/state_dict.h"
#include "launcher/model/weights_file.h"
#include "launcher/worker/checkpoint.h"
#include "launcher/worker/checkpoint_writer.h"
#include "launcher/worker/evaluation.h"
#include "launcher/worker/metrics_writer.h"
#include "launcher/worker/noise_scale.h"
#include "launcher/worker/plan_switches.h"
#include "launcher/worker/resume.h"
#include "launcher/worker/step_trace.h"
#include "launcher/worker/stop_signals.h"
#include "launcher/worker/stopwatch.h"
#include "launcher/worker/token_data.h"
#include "launcher/zero/training_engine.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/text_file.h"
#include "planner/formats/hf_config.h"
#include "planner/formats/model_config.h"
#include "planner/formats/step_cadence.h"
#include "planner/formats/worker_plan.h"

namespace poplar {
namespace {

struct MicroBatchResult {
  double loss_sum = 0;  // the loss summed over the micro-batch's tokens
  double seconds = 0;   // its compute, stretched on an emulated slower device
};

// The wall time since it was made less what `communicator` waited in collectives
// meanwhile: a phase's own work, its exposed communication being counted apart.
class OwnTime {
 public:
  explicit OwnTime(const Communicator& communicator)
      : communicator_(communicator), start_(Clock::now()), waited_(communicator.communication_seconds()) {}
  double Seconds() const { return SecondsSince(start_) - Waited(); }
  double Waited() const { return communicator_.communication_seconds() - waited_; }

 private:
  const Communicator& communicator_;
  Clock::time_point start_;
  double waited_;
};

// Compute of one micro-batch: forward and backward less the waits in collectives inside
// them (stage 2's and 3's, which the step counts as communication), and for an emulated
// slower device the extra wall time.
MicroBatchResult RunMicroBatch(TrainingEngine& engine, const Communicator& communicator, const TokenData& data,
                               std::int64_t first, int size, bool last, const EmulatedSpeed& speed,
                               torch::Device device) {
  const OwnTime time(communicator);
  const EmulatedCompute compute;
  auto [inputs, targets] = data.Batch(first, size);
  const double loss_sum = engine.MicroBatch(inputs.to(device), targets.to(device), last);  // waits for the device
  return {loss_sum, compute.Stretch(time.Seconds(), speed, static_cast<double>(inputs.numel()), time.Waited())};
}

// Out of device memory, said in the plan's terms: an emulated or real device's
// OutOfMemoryError read "tried to allocate 65536 bytes" and named nothing of the job.
// `what` is the work that ran out ("the micro-batch of 32 samples at step 3").
InputError OutOfMemory(const std::string& file, const std::string& key, const std::string& what,
                       const c10::OutOfMemoryError& error, const std::string& remedy) {
  return InputError(file, key,
                    what + " ran out of device memory (" + FirstLine(error.what_without_backtrace()) + "); " + remedy);
}

// The error of step `step` when `what` (its loss, gradient norm or held-out loss) is not a
// finite number: every rank sees the same (they are all-reduced) and stops alike, before
// anything of the step is written, so the newest checkpoint stays the last good state.
std::runtime_error Diverged(std::int64_t step, const std::string& what) {
  return std::runtime_error("training diverged at step " + std::to_string(step) + ": " + what +
                            "; nothing of this step was written. Lower --lr, or clip with --grad-clip");
}

// --lr and the schedule flags as AdamW's options; throws InputError naming the flag.
AdamWOptions OptimizerOptions(const TrainOptions& options) {
  LrScheduleSettings settings = options.schedule;
  const std::optional<LrDecay> decay = LrDecayNamed(options.lr_decay);
  if (!decay) throw InputError("--lr-decay", "", "must be constant, cosine or linear, got '" + options.lr_decay + "'");
  settings.decay = *decay;
  AdamWOptions adamw = options.adamw;
  adamw.schedule =
      ResolveLrSchedule(settings, adamw.lr, options.steps,
                        {"--warmup-steps", "--decay-steps", "--min-lr", "--steps", "add --lr-decay cosine or linear"});
  return adamw;
}

// Output paths are checked before the rendezvous, so a typo or a folder that takes no
// files fails at once on its own rank instead of after training (or as a peer's
// connection error); and no output may be one of the files the job reads. --save is
// rank 0's alone to write; --metrics each rank's own file, if any. Returns the lock of
// --checkpoint-dir, which rank 0 holds while it runs.
std::optional<FolderLock> RequireWritableOutputs(const TrainOptions& options, int rank) {
  const std::vector<InputFile> inputs = {{options.data, "the token file (--data)"},
                                         {options.plan, "the plan (--plan)"},
                                         {options.model_config, "the model configuration (--model-config)"},
                                         {options.init, "the initial state (--init)"},
                                         {options.eval_data, "the evaluation's token file (--eval-data)"}};
  const std::string metrics = MetricsWriter::PathFor(options.metrics, rank);
  const std::string trace = MetricsWriter::PathFor(options.trace, rank);
  // Nor one output another's: the state dict would replace the metrics, or find the
  // checkpoint folder in its way only after the training.
  using Output = std::pair<std::string, std::string>;  // flag, path ("" when not written here)
  const Output save_output{"--save", rank == 0 ? options.save : ""}, metrics_output{"--metrics", metrics},
      trace_output{"--trace", trace};
  const std::vector<Output> outputs = {
      save_output, metrics_output, trace_output, {"--checkpoint-dir", options.checkpoint_dir}};
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      if (!outputs[i].second.empty() && !outputs[j].second.empty() && SamePath(outputs[i].second, outputs[j].second)) {
        throw InputError(outputs[i].first, "",
                         outputs[i].second + " is also " + outputs[j].first + "; each output needs a path of its own");
      }
    }
  }
  // The checkpoint folders hold what the checkpoints write: a file inside one would be
  // replaced by a step folder or `latest`, deleted by --keep-checkpoints, or corrupt
  // the checkpoint --resume reads.
  for (const auto& [flag, path] : {save_output, metrics_output, trace_output}) {
    if (path.empty()) continue;
    for (const auto& [folder_flag, folder] :
         {std::pair{"--checkpoint-dir", options.checkpoint_dir}, std::pair{"--resume", options.resume}}) {
      if (!folder.empty() && IsWithin(path, folder)) {
        throw InputError(flag, "",
                         path + " is inside " + folder_flag + " " + folder +
                             ", which holds the checkpoints alone; write it elsewhere");
      }
    }
  }
  if (!options.save.empty() && rank == 0) RequireOutputApart(options.save, inputs, "--save");
  if (!trace.empty()) RequireOutputApart(trace, inputs, "--trace");
  if (!metrics.empty()) {
    RequireStreamOutputApart(metrics, inputs, "--metrics");  // appended to: /dev/stdout or a pipe will do
  }
  if (options.checkpoint_dir.empty()) return std::nullopt;
  PrepareCheckpointFolder(options.checkpoint_dir, "--checkpoint-dir");
  if (rank != 0) return std::nullopt;
  return LockCheckpointFolder(options.checkpoint_dir, "--checkpoint-dir");
}

// How this run trains (what its checkpoints record): the data as this rank's token file
// holds it, which every rank's must match (JobSettings), wherever each file is.
TrainingRecipe RecipeOf(const TrainOptions& options, const AdamWOptions& adamw, const WorkerPlan& plan,
                        const TokenData& data) {
  return {adamw, plan.global_batch, options.precision, data.tokens(), data.fingerprint()};
}

// What every rank must agree on before any collective that depends on it (the resume's
// broadcasts are shaped by the model): anything that decides which collectives run, or
// what is trained. Keys in the order a mismatch is most likely explained by: the model,
// the recipe's keys one by one ("'lr' is 0.1 here but 0.2 on rank 1"), then the rest.
std::string JobSettings(const TrainOptions& options, const TrainingRecipe& recipe, const WorkerPlan& plan,
                        const ModelConfig& config, const std::optional<Evaluation>& evaluation,
                        GlooReduceScatter gloo_reduce_scatter) {
  nlohmann::ordered_json settings = {{"model", ModelConfigObject(config)}};
  const nlohmann::ordered_json recipe_object = RecipeObject(recipe);
  for (const auto& [key, value] : recipe_object.items()) settings[key] = value;
  settings["plan"] = {{"stage", plan.stage}, {"micro_batches", plan.micro_batches}};
  if (!plan.state_shares.empty()) settings["plan"]["state_shares"] = plan.state_shares;
  settings["steps"] = options.steps;
  settings["batch_range"] = {options.batch_min, options.batch_max};
  settings["bucket_mb"] = options.bucket_mb;
  settings["save"] = !options.save.empty();
  settings["checkpoint_dir"] = !options.checkpoint_dir.empty();
  settings["checkpoint_every"] = options.checkpoint_every;
  settings["device"] = options.device.kind;
  settings["backend"] = options.backend;
  settings["gloo_reduce_scatter"] = GlooReduceScatterName(gloo_reduce_scatter);
  // The same evaluation everywhere: its rounds are collective at stage 3, and its loss a sum.
  settings["eval"] = nullptr;
  if (evaluation) {
    settings["eval"] = {{"every", options.eval_every},
                        {"samples", evaluation->samples},
                        {"tokens", evaluation->data.tokens()},
                        {"fingerprint", evaluation->data.fingerprint()}};
  }
  return settings.dump();
}

// Where training starts, agreed once the resume is done: the step, and a checksum of the
// parameters (the same --init and --seed, or the state every rank received).
std::string StartingPoint(const Decoder& model, std::int64_t first_step) {
  double checksum = 0;
  for (const auto& [name, parameter] : model->NamedParameters()) {
    checksum += parameter.detach().to(torch::kFloat64).sum().item<double>();
  }
  return nlohmann::ordered_json{{"first_step", first_step}, {"parameters_sum", checksum}}.dump();
}

// What a rank checks, loads and builds on its own, before it meets the others.
struct LocalSetup {
  torch::Device device;
  torch::ScalarType working;  // --precision's, which the device computes in
  CollectiveBackend backend;
  GlooReduceScatter gloo_reduce_scatter;
  AdamWOptions adamw;
  WorkerPlan plan;
  ModelConfig config;
  TokenData data;
  std::optional<Evaluation> evaluation;       // with --eval-data
  std::int64_t baseline_bytes;                // device memory in use before the model
  Decoder model{nullptr};                     // from --seed or --init; a --resume replaces it later
  MetricsWriter metrics;                      // opened, not yet started (a resume appends)
  std::optional<FolderLock> checkpoint_lock;  // rank 0's, of --checkpoint-dir
};

// --batch-min and --batch-max: both or neither, in order, around --plan's batch.
void RequireBatchRange(const TrainOptions& options, const WorkerPlan& plan) {
  if (options.batch_min == 0) return;
  if (options.batch_max == 0) throw InputError("--batch-min", "", "needs --batch-max: the adaptive batch's bounds");
  if (options.batch_max < options.batch_min) {
    throw InputError("--batch-max", "",
                     std::to_string(options.batch_max) + " is below --batch-min " + std::to_string(options.batch_min));
  }
  if (plan.global_batch < options.batch_min || plan.global_batch > options.batch_max) {
    throw InputError(plan.file, "global_batch",
                     "is " + std::to_string(plan.global_batch) + ", outside --batch-min " +
                         std::to_string(options.batch_min) + " to --batch-max " + std::to_string(options.batch_max));
  }
}

LocalSetup SetUpLocally(const TrainOptions& options, const DistributedEnv& env) {
  const torch::Device device = SetUpDevice(options.device, env.local_rank);
  if (device.is_cuda() && options.later_slowdown_step > 0) {
    throw InputError("--later-slowdown-step", "", "emulates a device on the CPU; a GPU is used as it is");
  }
  const torch::ScalarType working = ComputingType(options.precision, device, "--precision");
  const CollectiveBackend backend = ParseCollectiveBackend(options.backend, "--backend");
  Communicator::UsableBackend(device, backend, env.world_size);  // its error, before the rendezvous
  const GlooReduceScatter gloo_reduce_scatter = GlooReduceScatterOfEnvironment();
  const AdamWOptions adamw = OptimizerOptions(options);
  WorkerPlan plan = LoadWorkerPlan(options.plan);
  RequireWorldSize(plan, env.world_size);
  RequireBatchRange(options, plan);
  const ModelConfig config = LoadModelConfigOrFolder(options.model_config);
  TokenData data(options.data, config.block_size, config.vocab_size);
  std::optional<Evaluation> evaluation =
      LoadEvaluation(options.eval_data, options.eval_samples, plan, config, env.rank);
  std::optional<FolderLock> checkpoint_lock = RequireWritableOutputs(options, env.rank);
  const std::int64_t baseline_bytes = MemoryInUse(device);
  torch::manual_seed(options.seed);
  try {
    Decoder model = MakeDecoder(config);
    if (!options.init.empty()) LoadModelState(*model, ReadWeights(options.init, config), options.init);
    MetricsWriter metrics(options.metrics, env.rank);  // made once the inputs are read: a bad --init leaves none
    model->to(device);
    return {device,
            working,
            backend,
            gloo_reduce_scatter,
            adamw,
            std::move(plan),
            config,
            std::move(data),
            std::move(evaluation),
            baseline_bytes,
            model,
            std::move(metrics),
            std::move(checkpoint_lock)};
  } catch (const c10::OutOfMemoryError& error) {
    // (Reading --init holds the file's tensors beside the model's: libtorch's errors in
    // ReadStateDict pass this one through.)
    throw OutOfMemory(options.model_config, "",
                      "the model (" + std::to_string(config.ParameterCount()) + " parameters" +
                          (options.init.empty() ? "" : ", with --init read beside it") + ")",
                      error, "it needs a device with more memory");
  }
}

// An out-of-memory error while the model's states are made, said in the plan's terms.
InputError StatesOutOfMemory(const WorkerPlan& plan, int world_size, const c10::OutOfMemoryError& error) {
  return OutOfMemory(plan.file, "stage",
                     "the model's states at ZeRO stage " + std::to_string(plan.stage) +
                         " (its parameters, gradients and optimizer moments, before any micro-batch)",
                     error,
                     plan.stage < 3 && world_size > 1
                         ? "a higher stage shards more of them over the ranks (poplar plan chooses one that fits)"
                         : "they need a device with more memory, or more ranks to shard them over");
}

// POPLAR_TEST_OVERFLOW=STEP:RANK, a test's injected overflow (docs/worker.md): rank
// RANK's gradients of step STEP are made inf, as an fp16 overflow makes them.
std::optional<std::pair<std::int64_t, int>> OverflowTestOfEnvironment() {
  const char* text = std::getenv("POPLAR_TEST_OVERFLOW");
  if (text == nullptr) return std::nullopt;
  long long step = 0;
  int rank = 0;
  if (std::sscanf(text, "%lld:%d", &step, &rank) != 2) {
    throw InputError("POPLAR_TEST_OVERFLOW", "", "must be STEP:RANK, got '" + std::string(text) + "'");
  }
  return std::make_pair(static_cast<std::int64_t>(step), rank);
}

// What one step measured, for its metrics record.
struct StepFigures {
  double mean_loss = 0;  // over every token of the global batch
  double grad_norm = 0;
  double loss_scale = 0;  // with a loss scaler: the step's scale
  bool skipped = false;   // with a loss scaler: the gradients overflowed, no update
  double step_s = 0;
  double compute_s = 0;    // the rank's micro-batches, less their waits in collectives
  double optimizer_s = 0;  // the optimizer step, less its waits in collectives
  double communication_s = 0;
  Communicator::Volume volume;
  std::int64_t peak_bytes = 0;                // the step's peak device memory above the baseline
  std::int64_t state_bytes = 0;               // what the rank carries from step to step
  int plan = 0;                               // the plan it trained with (PlanSwitches::number)
  std::int64_t first_sample = 0;              // its batch's first sample (before the data's wrap)
  std::optional<NoiseScale::Estimate> noise;  // with --noise-scale on, where a pair was counted
  double noise_s = 0;                         // what the local norms took (TrainingEngine)
  // With a plan switch agreed in the step: the plan that trains the next one, and what
  // receiving it took (part of step_s).
  std::optional<WorkerPlan> next_plan;
  double switch_s = 0;
  // The step on the job's clock (seconds since every rank left the rendezvous's
  // barrier), and where its time went, each span from the step's start: the
  // micro-batches ([start, wall, compute, samples]: their wall time holds their waits in
  // collectives), the optimizer step and the loss's all-reduce ([start, wall]).
  double start_s = 0;
  std::vector<std::array<double, 4>> micro_batch_spans;
  std::array<double, 2> optimizer_span = {0, 0}, loss_span = {0, 0};
};

// The held-out loss after a step, when one is due.
struct HeldOut {
  double loss = 0;
  double seconds = 0;
};

// One rank's training run: everything before the first step is done by the
// constructor (the rendezvous, the agreement on the job's settings, the resume, the
// engine); then each Step trains one global batch, evaluates, writes metrics and
// checkpoints as due; Finish writes --save. Every rank makes the same calls in the same
// order, so the collectives inside them match.
class TrainingRun {
 public:
  explicit TrainingRun(const TrainOptions& options);

  std::int64_t first_step() const { return first_step_; }
  // Trains step `step` + 1 (0-based `step` counts the steps done).
  void Step(std::int64_t step);
  // After the last step: the final state dict (--save), once every rank is done.
  void Finish();

 private:
  // A stop that came while a checkpoint was in flight (stop_signals.h): no further step,
  // and no newer checkpoint to take its place; the writer ends the process once it is on
  // the disk.
  void StopIfAsked();
  // The engine for the plan's stage, once the ranks agree on where training starts.
  std::unique_ptr<TrainingEngine> MakeAgreedEngine();
  // The resumed Adam moments into the engine's shards; this run's line of training.
  CheckpointLine GoOnFromCheckpoint(std::optional<Resumed>& resumed);
  // The rank's micro-batches of step `step`, the optimizer step and the loss.
  StepFigures TrainStep(std::int64_t step);
  // The rank's micro-batches: the loss summed over their tokens, and their compute time.
  // Fills `spans` with each micro-batch's [start, wall, compute, samples] from `step_start`.
  std::pair<double, double> MicroBatches(std::int64_t step, Clock::time_point step_start,
                                         std::vector<std::array<double, 4>>& spans);
  // This rank's pairs for the noise scale: its local gradients' norms (the engine's, as
  // scaled by `loss_scale` / tokens per step) as mean gradients, against the step's
  // gradient norm. None with --noise-scale off.
  NoiseSums LocalNoiseSums(double grad_norm, double loss_scale);
  std::optional<HeldOut> EvaluateAfter(std::int64_t step);
  void Report(std::int64_t step, const StepFigures& figures, const std::optional<HeldOut>& held_out);
  void CheckpointAfter(std::int64_t step);
  // From the next step on, `plan` trains.
  void SwitchTo(WorkerPlan plan, std::int64_t step);
  // The steps from `step` (counted from 0) on train batches of `batch` samples: the
  // sequence records it, the learning rate follows it.
  void TrainBatchFrom(std::int64_t batch, std::int64_t step);
  // What a checkpoint records of the loss scaler, when one runs.
  std::optional<LossScaleRecord> LossScaleNow() const;

  const TrainOptions& options_;
  const DistributedEnv env_;
  LocalSetup local_;
  Communicator communicator_;
  const TrainingRecipe recipe_;
  std::int64_t first_step_ = 0;
  std::unique_ptr<TrainingEngine> engine_;
  std::optional<CheckpointWriter> writer_;  // rank 0's, with --checkpoint-dir
  std::optional<StepTrace> trace_;
  std::optional<LossScaler> scaler_;                           // --loss-scale dynamic (the default in fp16)
  std::optional<std::pair<std::int64_t, int>> overflow_test_;  // POPLAR_TEST_OVERFLOW: (step, rank)
  PlanSwitches switches_;
  Clock::time_point job_epoch_;        // the job's clock starts here, on every rank at once
  std::int64_t samples_done_ = 0;      // samples of the steps trained: the next step's first is this one
  std::vector<BatchStretch> batches_;  // the run's batch sequence (a checkpoint's "batch")
  NoiseScale noise_;
  EmulatedSpeed speed_;  // an emulated device's, this step (TrainOptions::later_slowdown)
  double tokens_per_step_ = 0;
  std::size_t last_computing_entry_ = 0;  // of the rank's micro-batches (the size of the list: none)
};

// The index of the last of `rank`'s micro-batches that computes (the size of its list
// when none does): its backward starts the step's final reductions.
std::size_t LastComputingEntry(const WorkerPlan& plan, int rank) {
  const std::vector<int>& micro_batches = plan.micro_batches[rank];
  std::size_t last = micro_batches.size();
  for (std::size_t entry = 0; entry < micro_batches.size(); ++entry) {
    if (micro_batches[entry] > 0) last = entry;
  }
  return last;
}

TrainingRun::TrainingRun(const TrainOptions& options)
    : options_(options),
      env_(DistributedEnv::FromEnvironment()),
      // A rank that stops here tells the others why (they would wait out --timeout for it).
      local_(Rendezvous::Before(env_, std::chrono::seconds(options.timeout_s),
                                [&] { return SetUpLocally(options, env_); })),
      communicator_(env_, std::chrono::seconds(options.timeout_s), local_.device, local_.backend,
                    local_.gloo_reduce_scatter),
      recipe_(RecipeOf(options, local_.adamw, local_.plan, local_.data)),
      switches_(options.plan_switches, env_.rank, options.batch_min, options.batch_max) {
  const WorkerPlan& plan = local_.plan;
  communicator_.RequireAgreement("job settings", JobSettings(options, recipe_, plan, local_.config, local_.evaluation,
                                                             local_.gloo_reduce_scatter));
  std::optional<Resumed> resumed = ResumeFromNewestCheckpoint(communicator_, local_.model, options.resume,
                                                              options.steps, local_.config, recipe_, local_.device);
  if (!resumed && options.resume_required) {
    throw InputError("--resume-required", "",
                     "no rank of this job holds a checkpoint to go on from (a node that held them is not part of the "
                     "plan, or they were lost with it); the run would start over from step 0");
  }
  first_step_ = resumed ? resumed->step : 0;
  // The batches so far: the checkpoint's sequence, or this plan's batch from step 0 (a
  // fresh run, a checkpoint of a fixed batch).
  if (resumed && resumed->batch) {
    batches_ = resumed->batch->sequence;
    samples_done_ = resumed->batch->samples_done;
  } else {
    batches_ = {{0, plan.global_batch}};
    samples_done_ = first_step_ * plan.global_batch;
  }
  local_.metrics.Start(/*append=*/resumed.has_value());
  engine_ = MakeAgreedEngine();
  TrainBatchFrom(plan.global_batch, first_step_);
  if (options.loss_scale == "dynamic" || (options.loss_scale.empty() && options.precision == "fp16")) {
    scaler_.emplace(options.scaler);
  }
  const CheckpointLine line = GoOnFromCheckpoint(resumed);
  if (env_.rank == 0 && !options.checkpoint_dir.empty()) {
    writer_.emplace(options.checkpoint_dir, local_.config, recipe_, options.keep_checkpoints, line);
  }
  last_computing_entry_ = LastComputingEntry(plan, env_.rank);
  tokens_per_step_ = static_cast<double>(plan.global_batch) * local_.config.block_size;
  overflow_test_ = OverflowTestOfEnvironment();
  // After the resume: the graphs then capture the parameters' and gradients' final buffers.
  engine_->CountLocalNorms(options.noise_scale);
  const bool graphs = engine_->ReplayFromGraphs(options.device.cuda_graphs);
  if (env_.rank == 0 && options.log_every > 0) {
    std::cerr << "poplar-worker[rank 0]: " << Count(env_.world_size, "rank") << ", ZeRO stage " << plan.stage
              << ", global batch " << plan.global_batch << ", " << local_.config.ParameterCount()
              << " parameters, steps " << first_step_ << ".." << options.steps << ", on " << local_.device.str()
              << ", collectives " << communicator_.backend_name()
              << (graphs ? ", micro-batches replayed from CUDA graphs" : "") << "\n";
  }
  trace_.emplace(MetricsWriter::PathFor(options.trace, env_.rank), options.trace_step, first_step_, options.steps,
                 local_.device, env_.rank);
  // The job's clock: every rank leaves this barrier within a collective's latency of the
  // others, so the records' start_s line the ranks up on one time axis, whatever their
  // machines' clocks say (the head's timeline, docs/operations.md).
  communicator_.Barrier();
  job_epoch_ = Clock::now();
}

std::unique_ptr<TrainingEngine> TrainingRun::MakeAgreedEngine() {
  const WorkerPlan& plan = local_.plan;
  try {
    // (The checksum's float64 copy of a parameter is a state's size, too.)
    communicator_.RequireAgreement("starting point", StartingPoint(local_.model, first_step_));
    return MakeEngine(plan.stage, local_.model, communicator_, local_.adamw,
                      BucketElements(options_.bucket_mb, local_.device), local_.working, plan.state_shares);
  } catch (const c10::OutOfMemoryError& error) {
    throw StatesOutOfMemory(plan, env_.world_size, error);
  }
}

CheckpointLine TrainingRun::GoOnFromCheckpoint(std::optional<Resumed>& resumed) {
  // This run's line of training: on from the checkpoint's, or a line of its own. Only
  // rank 0 writes checkpoints, so only it draws an id.
  const std::uint64_t run = env_.rank == 0 ? NewRunId() : 0;
  if (!resumed) return CheckpointLine{run, {}};
  const CheckpointLine line = resumed->line.ContinuedBy(run, first_step_);
  try {
    SendResumedMoments(communicator_, *engine_, *resumed, local_.device);
    if (scaler_ && resumed->loss_scale)
      scaler_->Restore(resumed->loss_scale->scale, resumed->loss_scale->growth_tracker);
  } catch (const c10::OutOfMemoryError& error) {
    throw OutOfMemory(local_.plan.file, "stage",
                      "resuming the Adam moments at ZeRO stage " + std::to_string(local_.plan.stage) +
                          " (one parameter's two fp32 moments beyond the model's states, before any micro-batch)",
                      error, "they need a device with more memory, or more ranks to shard the states over");
  }
  resumed.reset();
  return line;
}

void TrainingRun::StopIfAsked() {
  if (StopRequested() == 0) return;
  writer_.reset();  // finishes what is in flight
  EndByStopSignal();
}

void TrainingRun::Step(std::int64_t step) {
  StopIfAsked();
  const bool later = options_.later_slowdown_step > 0 && step + 1 >= options_.later_slowdown_step;
  // A later slowdown slows a declared rate alike (a throttled device).
  const double slowdown = later ? options_.later_slowdown : options_.device.slowdown;
  speed_ = SpeedOf(slowdown, options_.device.gflops * options_.device.slowdown / slowdown,
                   local_.config.TrainingFlopsPerToken());
  trace_->BeforeStep(step + 1);
  const StepFigures figures = TrainStep(step);
  samples_done_ += local_.plan.global_batch;
  trace_->AfterStep(step + 1, figures.step_s);
  // The held-out loss, after the step and outside its figures (step_s, communication,
  // peak memory: what profiles and predictions are about).
  const std::optional<HeldOut> held_out = EvaluateAfter(step);
  Report(step, figures, held_out);
  CheckpointAfter(step);
  if (writer_) writer_->Check();
  if (figures.next_plan) SwitchTo(*figures.next_plan, step + 1);
}

void TrainingRun::TrainBatchFrom(std::int64_t batch, std::int64_t step) {
  if (batches_.back().batch != batch) {
    if (batches_.back().from_step == step) {
      batches_.back().batch = batch;  // a stretch of no step yet
    } else {
      batches_.push_back({step, batch});
    }
    if (batches_.size() >= 2 && batches_[batches_.size() - 2].batch == batch) batches_.pop_back();
  }
  // The square-root rule: a batch of B trains at --lr times sqrt(B / the run's first batch).
  engine_->SetLearningRateFactor(std::sqrt(static_cast<double>(batch) / static_cast<double>(batches_.front().batch)));
}

void TrainingRun::SwitchTo(WorkerPlan plan, std::int64_t step) {
  local_.plan = std::move(plan);
  last_computing_entry_ = LastComputingEntry(local_.plan, env_.rank);
  tokens_per_step_ = static_cast<double>(local_.plan.global_batch) * local_.config.block_size;
  TrainBatchFrom(local_.plan.global_batch, step);
  if (local_.evaluation) {
    local_.evaluation->share = EvalShareOf(local_.plan, env_.rank, local_.evaluation->samples);
  }
  if (env_.rank == 0 && options_.log_every > 0) {
    std::cerr << "poplar-worker[rank 0]: plan " << switches_.number() << " (" << local_.plan.file
              << ") trains from step " << step + 1 << "\n";
  }
}

StepFigures TrainingRun::TrainStep(std::int64_t step) {
  const torch::Device device = local_.device;
  StepFigures figures;
  const auto step_start = Clock::now();
  const double communication_before = communicator_.communication_seconds();
  const Communicator::Volume volume_before = communicator_.volume();
  // What the rank carries from step to step: its model states. Measured here, when no
  // collective is in flight (a finished one's buffers may linger on Gloo's threads).
  figures.state_bytes = MemoryInUse(device) - local_.baseline_bytes;
  figures.plan = switches_.number();
  figures.first_sample = samples_done_;
  ResetMemoryPeak(device);
  // With a loss scaler, each loss's gradient is scale / tokens: the global mean's
  // gradient times the scale, as GradScaler scales a mean loss (an injected overflow: inf).
  double backward_scale = scaler_ ? scaler_->scale() / tokens_per_step_ : 1.0;
  if (overflow_test_ && *overflow_test_ == std::make_pair(step + 1, env_.rank)) {
    backward_scale = std::numeric_limits<double>::infinity();
  }
  engine_->SetBackwardScale(backward_scale);
  figures.start_s = std::chrono::duration<double>(step_start - job_epoch_).count();
  const auto [loss_sum, compute_s] = MicroBatches(step, step_start, figures.micro_batch_spans);
  figures.compute_s = compute_s;
  // The optimizer step's own time: Step() less its waits in collectives (scaling,
  // norm, clipping, AdamW), what a profile's optimizer_step_s times at world size 1,
  // and stretched alike on an emulated device. (The stretch comes after the step's
  // all-gather rather than before; the loss's all-reduce below makes every rank wait
  // for it the same.)
  const OwnTime step_phase(communicator_);
  const EmulatedCompute step_compute;
  figures.optimizer_span[0] = SecondsSince(step_start);
  figures.grad_norm = engine_->Step(tokens_per_step_ * backward_scale);
  figures.optimizer_s = step_compute.Stretch(step_phase.Seconds(), speed_);
  figures.optimizer_span[1] = SecondsSince(step_start) - figures.optimizer_span[0];
  const NoiseSums noise = LocalNoiseSums(figures.grad_norm, backward_scale * tokens_per_step_);
  figures.noise_s = engine_->TakeLocalNormSeconds();
  // With the loss, the ranks whose gradient norm is not finite: at stage 0 each rank
  // computes the norm of its own all-reduced copy, which may round to inf on one alone;
  // and rank 0's offer of a plan for the next steps (its number and size; 0 from others).
  const std::optional<PlanOffer> offer = switches_.Next(local_.plan);
  // Then this rank's sums of the noise scale's pair estimates (noise_scale.h).
  auto loss = torch::tensor({loss_sum, std::isfinite(figures.grad_norm) ? 0.0 : 1.0, offer ? offer->number : 0.0,
                             offer ? static_cast<double>(offer->text.size()) : 0.0, noise.gradient_sq,
                             noise.gradient_sq_weight, noise.trace, noise.trace_weight, noise.pairs},
                            torch::kFloat64)
                  .to(device);
  figures.loss_span[0] = SecondsSince(step_start);
  communicator_.AllReduceSum(loss);
  const auto totals = loss.cpu();  // waits for the device
  figures.loss_span[1] = SecondsSince(step_start) - figures.loss_span[0];
  figures.mean_loss = totals[0].item<double>() / tokens_per_step_;
  const double ranks_not_finite = totals[1].item<double>();
  const int offered = static_cast<int>(totals[2].item<double>());
  if (options_.noise_scale) {
    figures.noise = noise_.Add({totals[4].item<double>(), totals[5].item<double>(), totals[6].item<double>(),
                                totals[7].item<double>(), totals[8].item<double>()});
  }
  // With a loss scaler, gradients that overflowed on every rank skipped the step on every
  // rank (the engine's norm is the same on all): the scale backs off. Ranks that
  // disagreed would have diverged: that stops the run, as below.
  if (scaler_ && std::isfinite(figures.mean_loss) && (ranks_not_finite == 0 || ranks_not_finite == env_.world_size)) {
    figures.loss_scale = scaler_->scale();
    figures.skipped = scaler_->Update(ranks_not_finite == 0);
  }
  // A step whose loss or gradient norm is not finite stops the run before anything of
  // it is written.
  if (!figures.skipped && (!std::isfinite(figures.mean_loss) || ranks_not_finite > 0)) {
    const std::string norm = ranks_not_finite > 0
                                 ? "not finite on " + Count(static_cast<std::int64_t>(ranks_not_finite), "rank")
                                 : std::to_string(figures.grad_norm);
    throw Diverged(step + 1, "the loss is " + std::to_string(figures.mean_loss) + " and the gradient norm " + norm);
  }
  if (offered > 0) {
    const auto switch_start = Clock::now();
    figures.next_plan = switches_.Receive(communicator_, device, offered,
                                          static_cast<std::int64_t>(totals[3].item<double>()), offer, local_.plan);
    figures.switch_s = SecondsSince(switch_start);
  }
  figures.step_s = SecondsSince(step_start);
  figures.volume = communicator_.volume().Since(volume_before);
  figures.communication_s = communicator_.communication_seconds() - communication_before;
  figures.peak_bytes = MemoryPeak(device) - local_.baseline_bytes;
  return figures;
}

std::pair<double, double> TrainingRun::MicroBatches(std::int64_t step, Clock::time_point step_start,
                                                    std::vector<std::array<double, 4>>& spans) {
  const WorkerPlan& plan = local_.plan;
  const std::vector<int>& micro_batches = plan.micro_batches[env_.rank];
  double loss_sum = 0, compute_s = 0;
  std::int64_t first = samples_done_ + plan.RankOffset(env_.rank);
  for (std::size_t entry = 0; entry < micro_batches.size(); ++entry) {
    const int size = micro_batches[entry];
    if (size > 0) {
      MicroBatchResult result;
      const double start = SecondsSince(step_start);
      try {
        result = RunMicroBatch(*engine_, communicator_, local_.data, first, size, entry == last_computing_entry_,
                               speed_, local_.device);
      } catch (const c10::OutOfMemoryError& error) {
        throw OutOfMemory(plan.file, plan.RankKey(env_.rank) + ".micro_batches[" + std::to_string(entry) + "]",
                          "its micro-batch of " + Count(size, "sample") + " at step " + std::to_string(step + 1), error,
                          "the plan asks more of this device than it holds (poplar plan sizes micro-batches "
                          "from the device's profile: profile it again, as another process may share it, and "
                          "plan again; or give this rank smaller micro-batches)");
      }
      loss_sum += result.loss_sum;
      compute_s += result.seconds;
      spans.push_back({start, SecondsSince(step_start) - start, result.seconds, static_cast<double>(size)});
      first += size;
    }
    engine_->EndRound(size > 0);
  }
  return {loss_sum, compute_s};
}

NoiseSums TrainingRun::LocalNoiseSums(double grad_norm, double loss_scale) {
  const std::vector<double> norms = engine_->TakeLocalNorms();
  const WorkerPlan& plan = local_.plan;
  const std::vector<int>& micro_batches = plan.micro_batches[env_.rank];
  // A period per step at stages 0-1 (the rank's samples), per round at stages 2-3.
  std::vector<std::int64_t> samples;
  if (plan.stage <= 1) {
    samples.push_back(plan.RankSamples(env_.rank));
  } else {
    samples.assign(micro_batches.begin(), micro_batches.end());
  }
  if (norms.size() != samples.size() || !std::isfinite(loss_scale) || loss_scale <= 0) return {};
  // A local gradient g is loss_scale / (B L) times the sum over its b samples' tokens;
  // the mean gradient over them is g * B / (loss_scale * b).
  std::vector<SmallBatchNorm> small;
  const auto batch = static_cast<double>(plan.global_batch);
  for (std::size_t i = 0; i < norms.size(); ++i) {
    if (samples[i] <= 0) continue;
    const double factor = batch / (loss_scale * static_cast<double>(samples[i]));
    small.push_back({samples[i], norms[i] * factor * factor});
  }
  return PairEstimates(small, plan.global_batch, grad_norm * grad_norm);
}

std::optional<HeldOut> TrainingRun::EvaluateAfter(std::int64_t step) {
  if (!local_.evaluation || !DueAfterStep(step + 1, options_.eval_every, options_.steps)) return std::nullopt;
  const auto eval_start = Clock::now();
  const double loss =
      Evaluate(*engine_, communicator_, *local_.evaluation, local_.config.block_size, speed_, local_.device);
  // An update that overflowed after a finite loss shows here first.
  if (!std::isfinite(loss)) throw Diverged(step + 1, "the held-out loss after it is " + std::to_string(loss));
  return HeldOut{loss, SecondsSince(eval_start)};
}

void TrainingRun::Report(std::int64_t step, const StepFigures& figures, const std::optional<HeldOut>& held_out) {
  const WorkerPlan& plan = local_.plan;
  const std::vector<int>& micro_batches = plan.micro_batches[env_.rank];
  nlohmann::json record = {{"step", step + 1},
                           {"rank", env_.rank},
                           {"world_size", env_.world_size},
                           {"stage", plan.stage},
                           {"loss", figures.mean_loss},
                           {"grad_norm", figures.grad_norm},
                           {"lr", engine_->learning_rate()},  // the rate the update took
                           {"step_s", figures.step_s},
                           {"compute_s", figures.compute_s},
                           {"communication_s", figures.communication_s},
                           {"all_reduced_bytes", figures.volume.all_reduced},
                           {"reduce_scattered_bytes", figures.volume.reduce_scattered},
                           {"all_gathered_bytes", figures.volume.all_gathered},
                           {"optimizer_s", figures.optimizer_s},
                           {"samples", std::accumulate(micro_batches.begin(), micro_batches.end(), 0)},
                           {"samples_per_s", plan.global_batch / figures.step_s},
                           {"tokens_per_s", tokens_per_step_ / figures.step_s},
                           {"peak_bytes", figures.peak_bytes},
                           {"state_bytes", figures.state_bytes},
                           {"plan", figures.plan},
                           {"global_batch", plan.global_batch},
                           {"first_sample", figures.first_sample}};
  if (figures.noise) {
    record["grad_sq_est"] = figures.noise->gradient_sq;
    record["grad_var_est"] = figures.noise->trace;
    record["noise_scale"] = figures.noise->noise_scale;
  }
  if (options_.noise_scale) record["noise_s"] = figures.noise_s;
  record["start_s"] = figures.start_s;
  record["spans"] = {{"micro_batches", figures.micro_batch_spans},
                     {"optimizer", figures.optimizer_span},
                     {"loss_all_reduce", figures.loss_span}};
  if (figures.next_plan) {
    record["next_plan"] = switches_.number();
    record["switch_s"] = figures.switch_s;
  }
  if (scaler_) {
    record["loss_scale"] = figures.loss_scale;
    record["skipped"] = figures.skipped;
  }
  if (local_.evaluation) record["eval_every"] = options_.eval_every;
  if (held_out) {
    record["val_loss"] = held_out->loss;
    record["eval_s"] = held_out->seconds;
  }
  local_.metrics.Write(record);
  if (env_.rank == 0 && options_.log_every > 0 &&
      (DueAfterStep(step + 1, options_.log_every, options_.steps) || held_out)) {
    char val_text[32] = "";
    if (held_out) std::snprintf(val_text, sizeof val_text, " val loss %.4f", held_out->loss);
    std::fprintf(stderr, "poplar-worker[rank 0]: step %lld loss %.4f grad norm %.3f %.1f samples/s%s\n",
                 static_cast<long long>(step + 1), figures.mean_loss, figures.grad_norm,
                 plan.global_batch / figures.step_s, val_text);
  }
}

std::optional<LossScaleRecord> TrainingRun::LossScaleNow() const {
  if (!scaler_) return std::nullopt;
  return LossScaleRecord{scaler_->scale(), scaler_->growth_tracker(), engine_->optimizer_steps()};
}

void TrainingRun::CheckpointAfter(std::int64_t step) {
  if (options_.checkpoint_dir.empty() || !DueAfterStep(step + 1, options_.checkpoint_every, options_.steps)) return;
  // Gathered by every rank (collectives), written by rank 0 in the background. One
  // still waiting to be written gives way to it first, so that memory holds at most
  // two (if this gather then fails, a peer gone, the waiting one is lost with it).
  StopIfAsked();
  const bool rank0 = env_.rank == 0;
  const std::optional<std::int64_t> replaced = writer_ ? writer_->DropWaiting() : std::nullopt;
  std::optional<BatchRecord> batch;
  if (options_.batch_min > 0) batch = BatchRecord{batches_, samples_done_};
  Checkpoint checkpoint{step + 1, engine_->FullState(rank0), engine_->GatherMoments(rank0), LossScaleNow(), batch};
  if (writer_) writer_->Start(std::move(checkpoint));
  if (replaced) {
    std::cerr << "poplar-worker[rank 0]: warning: the checkpoint of step " << *replaced
              << " was not written: the one of step " << step + 1
              << " came while an earlier one was still being written (a disk slower than --checkpoint-every)\n";
  }
}

void TrainingRun::Finish() {
  StopIfAsked();  // no --save after a stop
  const bool rank0 = env_.rank == 0;
  const StateDict saved = options_.save.empty() ? StateDict{} : engine_->FullState(rank0);  // collective at stage 3
  // Every rank's part is done; rank 0's writes come after the barrier, so that no rank
  // waits for the disk in a collective.
  communicator_.Barrier();
  if (rank0 && !options_.save.empty()) {
    RequireFiniteState(saved, options_.steps, "--save was not written");
    WriteWeights(options_.save, saved, local_.config);
  }
  if (writer_) writer_->Finish();
}

}  // namespace

void Train(const TrainOptions& options) {
  InstallStopHandlers();
  TrainingRun run(options);
  for (std::int64_t step = run.first_step(); step < options.steps; ++step) run.Step(step);
  run.Finish();
}

}  // namespace poplar
