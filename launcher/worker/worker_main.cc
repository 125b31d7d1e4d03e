// `poplar-worker`: trains one rank (train), measures one device (profile) or the
// collectives among all ranks (network).
// Every error — bad input, a libtorch or Gloo failure, a dead peer, out of memory — is
// caught by RunApp and becomes one line on stderr naming the rank, and a non-zero exit:
//   1 bad input or a failed run, 2 bad usage (flags), 70 internal error.
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <variant>

#include "launcher/comm/communicator.h"
#include "launcher/device/device.h"
#include "launcher/worker/network_mode.h"
#include "launcher/worker/profile_mode.h"
#include "launcher/worker/train.h"
#include "planner/base/run_app.h"
#include "planner/formats/job_settings.h"
#include "planner/formats/training_limits.h"

namespace {

// The prefix of every error line. A profile is one process of no job: "poplar-worker
// profile". Otherwise the rank as given (0 when RANK is unset, as for one process; an
// empty RANK is an error of its own, named in the line).
std::string Who(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "profile") return "poplar-worker profile";
  const char* rank = std::getenv("RANK");
  if (rank != nullptr && *rank == '\0') return "poplar-worker";
  return std::string("poplar-worker[rank ") + (rank ? rank : "0") + "]";
}

using poplar::NumberWhere;
// Adam's betas, like PyTorch's: 0 <= beta < 1.
const CLI::Validator kBelowOne = NumberWhere([](double v) { return v >= 0 && v < 1; }, "a number in [0, 1)");
const CLI::Validator kPositive = NumberWhere([](double v) { return v > 0; }, "a positive number");
// Counts of steps, bounded as the job settings' (2^40): a larger one is refused, never
// saturated to INT64_MAX.
const CLI::Validator kCount = poplar::WholeNumberIn(0, poplar::kMostJobSteps);
const CLI::Validator kBytes = poplar::WholeNumberIn(0, std::int64_t{1} << 50);  // up to a pebibyte
const CLI::Validator kSlowdown = NumberWhere([](double v) { return v >= 1 && v <= 1000; }, "a factor from 1 to 1000");

// The device flags, alike in every mode (launcher/device/device_flags.h). `cuda` says what a
// GPU means to the mode.
void AddDeviceFlags(CLI::App* command, poplar::DeviceFlags& flags, const std::string& cuda) {
  command->add_option("--device", flags.kind, "cpu (emulated devices too) or cuda (" + cuda + ")")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  // At most what an agent file allows an emulated device (agent_config.cc).
  command->add_option("--threads", flags.threads, "Intra-op CPU threads, at most 1024 (0: libtorch default)")
      ->check(poplar::WholeNumberIn(0, 1024));
  command
      ->add_option("--slowdown", flags.slowdown, "Emulated device: each compute lasts this many times its work (>= 1)")
      ->check(kSlowdown);
  command
      ->add_option("--memory-bytes", flags.memory_bytes,
                   "Emulated device memory in bytes, enforced on CPU tensors (0: no cap)")
      ->check(kBytes);
  command
      ->add_option("--gflops", flags.gflops,
                   "Emulated device: its rate, GFLOP/s; compute lasts at least its FLOPs over it (0: none)")
      ->check(NumberWhere([](double v) { return v >= 0 && v <= 1e9; }, "a rate from 0 to 1e9"));
  command->add_option("--cpus", flags.cpus, "Emulated device: run on these CPUs only, \"0-3,8\" (default: any)");
  command
      ->add_option("--cuda-graphs", flags.cuda_graphs,
                   "cuda: replay one-rank micro-batches at stages 0-1 from CUDA graphs (on or off)")
      ->check(CLI::IsMember({"on", "off", "true", "false"}))
      ->default_str("on");
}

template <typename T>
constexpr bool kIsOptional = false;
template <typename T>
constexpr bool kIsOptional<std::optional<T>> = true;

// What the worker takes for a job setting's value (planner/formats/job_settings.h).
CLI::Validator SettingCheck(const poplar::JobSetting& setting) {
  return std::visit(
      [](const auto& kind) -> CLI::Validator {
        using Kind = std::decay_t<decltype(kind)>;
        if constexpr (std::is_same_v<Kind, poplar::CountSetting>) {
          return poplar::WholeNumberIn(kind.low, kind.high);
        } else if constexpr (std::is_same_v<Kind, poplar::NumberSetting>) {
          const std::string what = kind.zero_allowed ? "zero or a positive number" : "a positive number";
          return NumberWhere([kind](double v) { return !poplar::Refusal(kind, v); },
                             std::isinf(kind.most) ? what : what + ", " + kind.most_reason);
        } else if constexpr (std::is_same_v<Kind, poplar::ChoiceSetting>) {
          return CLI::IsMember(kind.choices);
        } else {
          if (kind.folder) return CLI::ExistingPath;
          return CLI::ExistingFile;
        }
      },
      setting.kind);
}

// The flag of the job setting `key`, bound to `target`: its name, help, check and the
// setting it needs come from the setting's row (planner/formats/job_settings.h). A
// setting a job must set may still have a default here (--steps: 1).
template <typename T>
CLI::Option* AddSettingFlag(CLI::App* command, const std::string& key, T& target) {
  const poplar::JobSetting& setting = poplar::JobSettingNamed(key);
  CLI::Option* option = command->add_option(setting.flag, target, setting.help)->check(SettingCheck(setting));
  if constexpr (!kIsOptional<T>) option->capture_default_str();
  if (!setting.needs.empty()) option->needs(command->get_option(poplar::JobSettingNamed(setting.needs).flag));
  return option;
}

void AddTrainCommand(CLI::App& app, poplar::TrainOptions& o) {
  CLI::App* train = app.add_subcommand("train", "Train one rank with its plan's micro-batch schedule");
  train->add_option("--plan", o.plan, "Plan file (poplar plan)")->required()->check(CLI::ExistingFile);
  train
      ->add_option("--plan-switches", o.plan_switches,
                   "Folder where plans that replace --plan between steps appear as plan-1.json, plan-2.json, ... "
                   "(read by rank 0; the same stage, batch, ranks and state shares, other micro-batches)")
      ->check(poplar::NotEmpty());
  train
      ->add_option("--model-config", o.model_config,
                   "Model configuration (JSON), or a Hugging Face model folder (its config.json)")
      ->required()
      ->check(CLI::ExistingPath);
  AddSettingFlag(train, "data", o.data)->required();
  AddSettingFlag(train, "steps", o.steps);
  AddSettingFlag(train, "init", o.init);
  auto* later_slowdown_step =
      train
          ->add_option("--later-slowdown-step", o.later_slowdown_step,
                       "Emulated device: from this step on, stretch compute by --later-slowdown instead")
          ->check(poplar::WholeNumberIn(std::int64_t{1}, std::int64_t{1} << 40));
  train
      ->add_option("--later-slowdown", o.later_slowdown,
                   "Emulated device: the slowdown from --later-slowdown-step on (a device that throttles or recovers)")
      ->check(kSlowdown)
      ->needs(later_slowdown_step);

  train->add_option("--save", o.save, "Write the final weights here (rank 0): .safetensors, else a state dict")
      ->check(poplar::NotEmpty());
  AddSettingFlag(train, "lr", o.adamw.lr);
  AddSettingFlag(train, "warmup_steps", o.schedule.warmup_steps);
  AddSettingFlag(train, "lr_decay", o.lr_decay);
  AddSettingFlag(train, "decay_steps", o.schedule.decay_steps);
  AddSettingFlag(train, "min_lr", o.schedule.min_lr);
  train->add_option("--beta1", o.adamw.beta1, "AdamW beta1, in [0, 1)")->check(kBelowOne)->capture_default_str();
  train->add_option("--beta2", o.adamw.beta2, "AdamW beta2, in [0, 1)")->check(kBelowOne)->capture_default_str();
  train->add_option("--eps", o.adamw.eps, "AdamW epsilon")->check(kPositive)->capture_default_str();
  AddSettingFlag(train, "weight_decay", o.adamw.weight_decay);
  AddSettingFlag(train, "grad_clip", o.adamw.grad_clip);
  AddDeviceFlags(train, o.device, "GPU LOCAL_RANK of those visible");
  train
      ->add_option("--backend", o.backend,
                   "Collectives: auto (nccl on cuda, gloo on cpu; none for 1 rank), gloo (also for CUDA tensors, "
                   "through host memory: several ranks on one GPU) or nccl; named explicitly, used even by 1 rank")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  train
      ->add_option("--precision", o.precision,
                   "fp32, bf16 or fp16 (16-bit compute and communication, fp32 master weights and Adam state; "
                   "fp16 with dynamic loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  train
      ->add_option("--loss-scale", o.loss_scale,
                   "dynamic: scale the loss's gradient, skip steps whose gradients overflow (PyTorch's "
                   "GradScaler); off. Default: dynamic in fp16, else off")
      ->check(CLI::IsMember({"dynamic", "off"}));
  train->add_option("--loss-scale-init", o.scaler.init_scale, "The dynamic loss scale's first value")
      ->check(CLI::Range(1.0, 1e30))
      ->capture_default_str();
  train
      ->add_option("--loss-scale-growth-interval", o.scaler.growth_interval,
                   "Double the loss scale after this many steps without overflow")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  train->add_option("--metrics", o.metrics, "Per-step metrics, JSON lines ({rank} in the path: every rank)")
      ->check(poplar::NotEmpty());
  CLI::Option* checkpoint_dir =
      train->add_option("--checkpoint-dir", o.checkpoint_dir, "Write checkpoints here (and at the end)")
          ->check(poplar::NotEmpty());
  // Without a folder to write in they would do nothing, silently.
  AddSettingFlag(train, "checkpoint_every", o.checkpoint_every)->needs(checkpoint_dir);
  AddSettingFlag(train, "keep_checkpoints", o.keep_checkpoints)->needs(checkpoint_dir);
  AddSettingFlag(train, "eval_data", o.eval_data);
  AddSettingFlag(train, "eval_every", o.eval_every);
  AddSettingFlag(train, "eval_samples", o.eval_samples);
  AddSettingFlag(train, "batch_min", o.batch_min);
  AddSettingFlag(train, "batch_max", o.batch_max);
  train->add_option("--resume", o.resume, "Resume from a checkpoint (step folder or checkpoint folder)")
      ->check(CLI::ExistingDirectory);
  train
      ->add_option("--noise-scale", o.noise_scale,
                   "Estimate the gradient noise scale from the local and global gradient norms (on, off)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"on", true}, {"off", false}}))
      ->default_str("on");
  train->add_flag("--resume-required", o.resume_required,
                  "Fail, rather than start over from step 0, when no rank holds a checkpoint (--resume)");
  AddSettingFlag(train, "seed", o.seed);
  train->add_option("--timeout", o.timeout_s, "Seconds before a rendezvous or collective gives up")
      ->check(poplar::WholeNumberIn(1, 86400))
      ->capture_default_str();
  train->add_option("--bucket-mb", o.bucket_mb, "Gradient and parameter bucket size in MiB (0: 1 on CPU, 25 on CUDA)")
      ->check(NumberWhere([](double v) { return v >= 0 && v <= 4096; }, "a number of MiB from 0 to 4096"))
      ->capture_default_str();
  train->add_option("--log-every", o.log_every, "Progress line every N steps on rank 0 (0: none)")
      ->check(kCount)
      ->capture_default_str();
  auto* trace =
      train
          ->add_option(
              "--trace", o.trace,
              "Profile one step: each operator's and kernel's count and time, as JSON ({rank} in the path: every rank)")
          ->check(poplar::NotEmpty());
  train
      ->add_option("--trace-step", o.trace_step,
                   "With --trace: the N-th step this run takes (its last if it takes fewer)")
      ->check(poplar::WholeNumberIn(1, poplar::kMostJobSteps))
      ->needs(trace)
      ->capture_default_str();
  train->callback([&o] { poplar::Train(o); });
}

void AddProfileCommand(CLI::App& app, poplar::ProfileOptions& o) {
  CLI::App* profile = app.add_subcommand("profile", "Measure one device per ZeRO stage; write a profile file");
  profile
      ->add_option("--model-config", o.model_config,
                   "Model configuration (JSON), or a Hugging Face model folder (its config.json)")
      ->required()
      ->check(CLI::ExistingPath);
  profile->add_option("-o,--output", o.output, "Profile file to write")->required()->check(poplar::NotEmpty());
  profile->add_option("--device-type", o.device_type, "Device type name written in the profile")->required();
  AddDeviceFlags(profile, o.device, "the first visible GPU");
  profile->add_option("--stage", o.stages, "ZeRO stage(s) to measure (repeatable)")
      ->check(poplar::WholeNumberIn(0, 3))
      ->capture_default_str();
  profile->add_option("--precision", o.precision, "fp32 or bf16, as training will use")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  profile->add_option("--repeats", o.repeats, "Passes over the stages: timed runs per micro-batch size (median)")
      ->check(poplar::WholeNumberIn(1, 100))
      ->capture_default_str();
  profile
      ->add_option("--point-seconds", o.point_seconds,
                   "Time each size over consecutive runs until they add up to this, at most 5 runs (0: one run)")
      ->check(poplar::NumberWhere([](double v) { return v >= 0 && v <= 60; }, "seconds from 0 to 60"))
      ->capture_default_str();
  profile->add_option("--largest-micro-batch", o.largest_micro_batch, "Stop growing micro-batches here")
      ->check(poplar::WholeNumberIn(1, 1 << 20))
      ->capture_default_str();
  profile->callback([&o] {
    // Measured twice, a stage would be written twice, and the planner refuses that file.
    std::set<int> seen;
    for (const int stage : o.stages) {
      if (!seen.insert(stage).second) {
        throw CLI::ValidationError("--stage", "stage " + std::to_string(stage) + " is given twice");
      }
    }
    poplar::Profile(o);
  });
}

void AddNetworkCommand(CLI::App& app, poplar::NetworkOptions& o) {
  CLI::App* network = app.add_subcommand(
      "network", "Time all-reduce, reduce-scatter and all-gather among all ranks (torchrun environment)");
  AddDeviceFlags(network, o.device, "GPU LOCAL_RANK of those visible");
  network->add_option("--backend", o.backend, "Collectives, as for train: auto, gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  network->add_option("--precision", o.precision, "Payload type, as training sends it: fp32, or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  network->add_option("--metrics", o.metrics, "Rank 0 writes one JSON line per measured collective and size here");
  network->add_option("--max-bytes", o.max_bytes, "Largest payload in bytes (from 4 KiB, x4)")
      ->check(poplar::WholeNumberIn(std::int64_t{8192}, std::int64_t{1} << 40))
      ->capture_default_str();
  network->add_option("--repeats", o.repeats, "Timed runs per collective and size (median)")
      ->check(poplar::WholeNumberIn(1, 1000))
      ->capture_default_str();
  network->add_option("--timeout", o.timeout_s, "Seconds before the rendezvous or a collective gives up")
      ->check(poplar::WholeNumberIn(1, 86400))
      ->capture_default_str();
  network
      ->add_option("--state-shares", o.state_shares,
                   "Every rank's share, comma-separated (as a plan's state_share): reduce-scatter and all-gather "
                   "move uneven chunks")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1e9));
  network->callback([&o] { poplar::MeasureNetwork(o); });
}

// A rank of `train` or `network` whose command line is refused (a flag its build does
// not know, a value out of range) tells the ranks waiting for it at the rendezvous, as a
// rank stopping on bad input does (Train): they would wait out --timeout for it. It
// tries for 30 s, whatever its rank: its error is printed already, and rank 0 opens its
// store only after loading its plan, data and model (a GPU's start-up takes seconds). A
// rank 0 hosts the message until every other rank has read it, 30 s at most.
void TellTheOthersOfAUsageError(const std::string& command, const std::string& message) {
  if (command != "train" && command != "network") return;
  try {
    const poplar::DistributedEnv env = poplar::DistributedEnv::FromEnvironment();
    poplar::Rendezvous::TellTheOthersThisRankStopped(env, message, std::chrono::seconds(30));
  } catch (const std::exception&) {
    // An environment that cannot be read: the others' rendezvous names this rank.
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A reader that went away (`--metrics >(head)`, `| head`) is a failed write, reported
  // as such, not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"poplar-worker: one rank of a poplar ZeRO training job, or a device profiler", "poplar-worker"};
  // The agents' profile cache keys on this line: change it when measurements change.
  app.set_version_flag("--version", std::string("poplar-worker " POPLAR_VERSION " (libtorch ") + TORCH_VERSION +
                                        (poplar::BuiltWithCuda() ? ", CUDA" : ", CPU only") + ")");
  poplar::TrainOptions train_options;
  poplar::ProfileOptions profile_options;
  poplar::NetworkOptions network_options;
  AddTrainCommand(app, train_options);
  AddProfileCommand(app, profile_options);
  AddNetworkCommand(app, network_options);
  return poplar::RunApp(app, argc, argv, "poplar-worker", Who(argc, argv), "train, profile or network",
                        /*runtime_errors_fail=*/true, TellTheOthersOfAUsageError);
}
