// `poplar-worker train`: one rank of a ZeRO data-parallel training job that follows its
// plan's micro-batch schedule (docs/worker.md: its flags and training semantics).
#pragma once

#include <cstdint>
#include <string>

#include "launcher/device/device_flags.h"
#include "launcher/zero/adamw.h"
#include "launcher/zero/loss_scaler.h"
#include "planner/formats/lr_schedule.h"

namespace poplar {

struct TrainOptions {
  std::string plan;                   // plan file (docs/formats.md)
  std::string plan_switches;          // folder of plans that replace it between steps (plan_switches.h)
  std::string model_config;           // model configuration (docs/formats.md)
  std::string data;                   // token file, uint16 or uint32 (docs/formats.md)
  std::int64_t steps = 1;             // train until this many optimizer steps are done
  std::string init;                   // optional initial state dict (torch.save(dict))
  std::string save;                   // optional final state dict, written by rank 0
  AdamWOptions adamw;                 // its schedule is resolved from the two fields below
  LrScheduleSettings schedule;        // --warmup-steps, --decay-steps, --min-lr
  std::string lr_decay = "constant";  // --lr-decay: constant, cosine or linear
  DeviceFlags device;
  // Emulation of a device whose speed changes during a run (docs/worker.md, "Emulated
  // devices"): from the run's step `later_slowdown_step` on (the global step; 0: never),
  // compute is stretched by `later_slowdown` instead of device.slowdown.
  std::int64_t later_slowdown_step = 0;
  double later_slowdown = 1.0;
  std::string backend = "auto";       // collectives: auto (NCCL on cuda, Gloo on cpu), gloo, nccl
  std::string precision = "fp32";     // fp32, bf16 or fp16: 16-bit compute and communication,
                                      // fp32 master weights and Adam state
  std::string loss_scale;             // dynamic or off; empty: dynamic in fp16, else off
  LossScalerOptions scaler;           // --loss-scale-init, --loss-scale-growth-interval
  std::string metrics;                // JSONL; "{rank}" is replaced by the rank, else rank 0 only
  std::string checkpoint_dir;         // periodic checkpoints go here
  std::int64_t checkpoint_every = 0;  // steps; 0: only at the end when checkpoint_dir is set
  std::int64_t keep_checkpoints = 0;  // the newest N stay in checkpoint_dir; 0: every one
  std::string resume;                 // checkpoint (step folder or checkpoint folder) to start from
  bool resume_required = false;       // fail rather than start over when no rank holds a checkpoint
  std::string eval_data;              // held-out token file: its loss is evaluated (val_loss)
  std::int64_t eval_every = 0;        // steps; 0: only after the last step (with eval_data)
  std::int64_t eval_samples = 0;      // the first N samples of eval_data; 0: every one
  std::uint64_t seed = 1337;          // model initialisation when there is no --init
  int timeout_s = 120;                // rendezvous and every collective
  double bucket_mb = 0;               // gradient/parameter bucket size; 0: 1 MiB on CPU (Gloo),
                                      // 25 MiB on CUDA (NCCL), where big buckets pay off
  std::int64_t log_every = 1;         // progress line every N steps (rank 0); 0: none
  bool noise_scale = true;            // estimate the gradient noise scale (noise_scale.h)
  // Adaptive batch: plan switches may set the global batch within [batch_min, batch_max]
  // (0: the batch is --plan's for the whole run); the learning rate follows the
  // square-root rule against --plan's batch.
  std::int64_t batch_min = 0, batch_max = 0;
  std::string trace;            // one step's profile (launcher/worker/step_trace.h); "{rank}" as --metrics
  std::int64_t trace_step = 3;  // the run's N-th step is traced (its last if it takes fewer)
};

// Runs the rank; throws InputError for bad input and c10::Error/std::exception for
// failures (a dead peer, out of memory), which the caller turns into a message.
void Train(const TrainOptions& options);

}  // namespace poplar
