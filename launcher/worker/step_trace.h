// `poplar-worker train --trace FILE`: where one training step's time goes, as libtorch's
// profiler sees it, summed by name and written as one JSON object (docs/formats.md,
// "Step trace"):
//   {"step": 3, "rank": 0, "device": "cuda:0", "libtorch": "2.11.0", "step_s": 0.107,
//    "device_events": 2113,
//    "events": [{"name": "aten::mm", "on": "cpu", "count": 96, "total_s": 0.0123}, ...]}
// "cpu" events are operators on the host: an operator's time includes the operators it
// calls (they nest), and on a GPU it is the time to launch, not to run. Device events
// ("cuda") are kernels, copies and fills, timed on the device, which the profiler
// records where libtorch was built with Kineto (PyTorch's wheels are; Debian's libtorch
// is not: there device_events is 0); Kineto's device-side copies of host ranges are left
// out. Events are sorted by total time, longest first.
//
// The profiler is on for the traced step only (its bookkeeping slows the step a little;
// the step's own metrics line is still written, with that step's time). A trace that
// fails (the profiler refuses, the disk is full) is a warning: training goes on.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace poplar {

class StepTrace {
 public:
  // Traces the `nth` step of a run that takes steps first_step + 1 .. last_step (counting
  // from 1), or its last if it takes fewer; none when `path` is empty, and a warning when
  // the run takes no step. `path` was checked writable beforehand (RequireOutputApart).
  StepTrace(std::string path, std::int64_t nth, std::int64_t first_step, std::int64_t last_step, torch::Device device,
            int rank);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  // Around each step (counting from 1): before it, the traced step starts the profiler
  // (device work queued before is waited for first); after it, having taken `step_s`
  // seconds, it stops the profiler and writes the file whole (WriteFileAtomically).
  void BeforeStep(std::int64_t step);
  void AfterStep(std::int64_t step, double step_s);

 private:
  std::string path_;
  std::int64_t step_;  // the traced step; 0: none
  torch::Device device_;
  int rank_;
  bool running_ = false;
};

}  // namespace poplar
