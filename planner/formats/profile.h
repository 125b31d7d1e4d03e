// Profile files: what one device type can do for one model, per ZeRO stage.
//
// Written by `poplar-worker profile` (measured) or by hand/scripts (derived estimates);
// read by the planner. Format (JSON; docs/formats.md is the reference):
//
//   {"format": "poplar-profile/1",
//    "device_type": "A100-80GB", "memory_bytes": 85899345920,
//    "emulated": false, "source": "measured on ... | derived from public specifications",
//    "model": {"name": "gpt2-medium", "params": 354823168, "precision": "mixed"},
//    "stages": [{"stage": 0, "world_size": 1, "max_micro_batch": 24,
//                "optimizer_step_s": 0.011, "optimizer_fixed_s": 0.002,  // fixed: optional
//                "collectives": {"all_reduce_per_step": {"params": 354823168, "calls": 15},
//                                ...},                                     // optional
//                "points": [{"micro_batch": 1, "compute_s": 0.031, "peak_bytes": 9.1e9,
//                            "graph_compute_s": 0.009}, ...]},      // graph_compute_s optional
//               ...]}
//
// `points` are forward plus backward of one micro-batch on one device; `world_size` is
// the number of ranks the stage ran with while measuring and `state_share` (stages 1-3,
// optional) the fraction of the partitioned state the measuring rank held when not
// 1/world_size: together they set the model-state bytes in the peaks (docs/cost-model.md);
// `optimizer_step_s` is the time of one optimizer step over the parameters that rank
// updated, and `optimizer_fixed_s` (stages 1-3, optional) the part of it that does not
// shrink with the state a rank holds (docs/cost-model.md, "Optimizer").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/formats/model_config.h"
#include "planner/formats/precision.h"

namespace poplar {

struct ProfilePoint {
  int micro_batch = 0;          // samples, > 0
  double compute_s = 0;         // seconds for forward + backward, > 0
  std::int64_t peak_bytes = 0;  // peak device memory during the micro-batch, > 0
  // Seconds for forward + backward replayed from a CUDA graph, as a one-rank job runs
  // stages 0-1 on a GPU (launcher/zero/micro_batch_graphs.h); 0: not measured (optional in
  // the file, "graph_compute_s").
  double graph_compute_s = 0;
};

// How a stage's engine uses one kind of collective in one period: the parameters it
// hands over in all (elements, sent in the working precision) and in how many calls.
struct CollectiveUse {
  std::int64_t params = 0;
  int calls = 0;
};

// What a stage's engine moves, once per optimizer step and once per reduce round: the
// payloads and calls the cost model charges. `poplar-worker profile` takes them from the
// engine's own schedule (its buckets; stage 3 gathers the tied embedding once per
// micro-batch, not twice); without them the cost model's table applies
// (docs/cost-model.md).
struct CollectiveParams {
  CollectiveUse all_reduce_per_step;
  CollectiveUse reduce_scatter_per_step;
  CollectiveUse all_gather_per_step;
  CollectiveUse reduce_scatter_per_round;
  CollectiveUse all_gather_per_round;
};

// Every field of CollectiveParams with its key in profile files, in file order.
inline constexpr std::pair<const char*, CollectiveUse CollectiveParams::*> kCollectiveParamsFields[] = {
    {"all_reduce_per_step", &CollectiveParams::all_reduce_per_step},
    {"reduce_scatter_per_step", &CollectiveParams::reduce_scatter_per_step},
    {"all_gather_per_step", &CollectiveParams::all_gather_per_step},
    {"reduce_scatter_per_round", &CollectiveParams::reduce_scatter_per_round},
    {"all_gather_per_round", &CollectiveParams::all_gather_per_round},
};

struct StageProfile {
  int stage = 0;                                // 0..3
  int world_size = 1;                           // ranks while measuring, > 0
  std::optional<double> state_share;            // in (0, 1], stages 1-3; absent: 1/world_size
  int max_micro_batch = 0;                      // largest micro-batch that fit, >= 0
  double optimizer_step_s = 0;                  // >= 0
  std::optional<double> optimizer_fixed_s;      // in [0, optimizer_step_s]; stages 1-3, where measured
  std::optional<CollectiveParams> collectives;  // "collectives", optional
  // The most elements the stage's reduce-scatters and all-gathers had in flight at once
  // over a step (Communicator::most_elements_in_flight), >= 0; absent: 0. The measuring
  // rank held none of their buffers; the memory model adds them (FitMemory).
  std::int64_t collective_elements_in_flight = 0;
  std::vector<ProfilePoint> points;  // non-empty, increasing micro_batch

  // The fraction of the partitioned state the measuring rank held.
  double HeldShare() const { return state_share ? *state_share : 1.0 / world_size; }
};

struct ModelInfo {
  std::string name;
  std::int64_t params = 0;  // > 0
  Precision precision = Precision::kMixed;
  // The model configuration measured (poplar-worker profile writes it; optional, absent
  // in hand-made and derived profiles): two models of one parameter count may differ
  // in activation memory (n_head, block_size).
  std::optional<ModelConfig> config;
};

struct DeviceProfile {
  std::string file;  // where it was read from, for error messages
  std::string device_type;
  std::int64_t memory_bytes = 0;  // > 0
  bool emulated = false;
  // Whether the device computes in bf16 ("bf16"; NVIDIA: compute capability 8.0 and
  // newer; a CPU: yes); absent when unknown (hand-made profiles), taken as yes.
  std::optional<bool> bf16;
  std::string source;
  ModelInfo model;
  std::vector<StageProfile> stages;  // at most one per stage

  // nullptr if this profile has no measurements for `stage`.
  const StageProfile* Stage(int stage) const;
};

// A fraction of the partitioned state as tables and messages show it: "all", or "1/4"
// (profiles hold 1/2^k: StageProfile::state_share).
std::string HeldShareText(double share);

// Parses and validates JSON text; `file` names the source in errors. Throws InputError.
// A device type names its profile, <type>.json, in a profiles folder, and is shown in
// tables and messages: ASCII letters, digits and punctuation (no spaces), no '/', and
// not "." or "..". Returns "" for such a name, else the reason to give (cluster files,
// agent files and `poplar-worker profile --device-type` apply this one rule).
std::string DeviceTypeProblem(const std::string& type);

DeviceProfile ParseProfileJson(const std::string& text, const std::string& file);
DeviceProfile LoadProfileFile(const std::string& path);
// The JSON text of a profile, as ParseProfileJson reads it back.
std::string ProfileToJson(const DeviceProfile& profile);

}  // namespace poplar
