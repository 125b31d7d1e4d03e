// MicroBatchGraphs: a micro-batch's forward and backward replayed from a CUDA graph, one
// graph per micro-batch size, so that a small micro-batch costs the GPU's time rather than
// libtorch's CPU-side dispatch of its thousands of kernels, whose time varies with the
// host's speed (docs/benchmarks.md).
//
// The body (the work captured) must launch its work on the current CUDA stream alone,
// never wait for the device (no .item(), no collective), read and write every tensor
// made outside it at a fixed address (the parameters it reads, the gradients it
// accumulates into) and return a tensor of its own (the loss), which each replay
// rewrites in place.
//
// Until EndWarmUp (the engine calls it at the end of the first step) micro-batches run
// eagerly: they ready, on the stream, what a capture must find ready (cuBLAS workspaces,
// autograd's lazily built state), every size of the plan among them, while no graph
// holds memory yet. After it, the first micro-batch of each size is captured and then
// replayed (a capture records kernels, it runs none); later ones copy their inputs into
// the graph's and replay it. Capture needs a stream other than the legacy default one:
// SelectDevice (device.h) gives the worker one. Every size allocates from one memory
// pool, and the allocator's cache is emptied before each capture, so the graphs hold
// about the memory of the largest size's activations, which eager training's cache
// holds too. A size whose capture fails (out of memory, at the edge of the device) runs
// eagerly, said once on stderr.
//
// Only CUDA builds of the worker (POPLAR_WITH_CUDA) capture. Elsewhere no device is a
// GPU, so nothing constructs one (the constructor throws).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>

namespace poplar {

class MicroBatchGraphs {
 public:
  using Body = std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& targets)>;

  explicit MicroBatchGraphs(Body body);
  ~MicroBatchGraphs();
  MicroBatchGraphs(const MicroBatchGraphs&) = delete;
  MicroBatchGraphs& operator=(const MicroBatchGraphs&) = delete;

  // One micro-batch of `inputs` and `targets` ([size, block], on the GPU): the body's
  // result, not yet waited for (a replay's is rewritten by the next replay of its size).
  torch::Tensor Run(const torch::Tensor& inputs, const torch::Tensor& targets);
  // Ends the warm-up: later micro-batches are captured and replayed.
  void EndWarmUp() { warmed_up_ = true; }
  // Whether micro-batches of `size` samples now replay from a graph: false before their
  // first after the warm-up, and where the capture failed.
  bool Replays(std::int64_t size) const;

 private:
  struct Size;  // one micro-batch size's graph and its inputs and result
  Body body_;
  // The memory pool every size's graph allocates from (c10::cuda::MempoolId_t), this
  // object's alone: a micro-batch's memory is free again once its loss has been read,
  // before any other micro-batch runs, so sizes can share it; freed with the graphs.
  std::pair<unsigned long long, unsigned long long> pool_{0, 0};
  std::map<std::int64_t, std::unique_ptr<Size>> sizes_;
  bool warmed_up_ = false;
};

}  // namespace poplar
