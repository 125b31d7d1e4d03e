#include "launcher/zero/micro_batch_graphs.h"

#include <iostream>
#include <stdexcept>

#include "launcher/device/device.h"
#include "planner/base/text_file.h"

#ifdef POPLAR_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace poplar {

#ifdef POPLAR_WITH_CUDA

struct MicroBatchGraphs::Size {
  bool eager_only = false;  // its capture failed
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor inputs, targets, result;  // the graph's: fixed addresses
};

namespace {

// After a capture that threw (in the body, or in capture_end itself): ends it if the
// stream still captures, and stops the allocator from routing the stream's allocations
// to the pool (capture_end does both when it gets that far). Whatever the failed capture
// allocated is free in the pool again, for the next capture; a pool whose capture never
// ended stays reserved until the process ends (a failure's cost, on a rare path). Clears
// CUDA's last error, which the next kernel launch would otherwise report as its own.
void AbandonCapture(at::cuda::CUDAGraph& graph, c10::cuda::MempoolId_t pool, torch::Device device) {
  try {
    graph.capture_end();
  } catch (const std::exception&) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t abandoned = nullptr;
      if (cudaStreamEndCapture(stream, &abandoned) == cudaSuccess && abandoned) cudaGraphDestroy(abandoned);
    }
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device.index(), pool);
    } catch (const std::exception&) {
      // capture_end had already ended the routing
    }
  }
  (void)cudaGetLastError();
}

}  // namespace

MicroBatchGraphs::MicroBatchGraphs(Body body) : body_(std::move(body)), pool_(at::cuda::graph_pool_handle()) {}

// The sizes' tensors and graphs go first; the pool is released with its last graph.
MicroBatchGraphs::~MicroBatchGraphs() = default;

bool MicroBatchGraphs::Replays(std::int64_t size) const {
  const auto found = sizes_.find(size);
  return found != sizes_.end() && found->second->graph != nullptr;
}

torch::Tensor MicroBatchGraphs::Run(const torch::Tensor& inputs, const torch::Tensor& targets) {
  std::unique_ptr<Size>& slot = sizes_[inputs.size(0)];
  if (!slot) slot = std::make_unique<Size>();
  Size& size = *slot;
  if (size.graph) {
    size.inputs.copy_(inputs);
    size.targets.copy_(targets);
    size.graph->replay();
    return size.result;
  }
  if (size.eager_only || !warmed_up_) return body_(inputs, targets);
  const torch::Device device = inputs.device();
  // The eager runs' cached blocks go back to the device first: the capture allocates its
  // own, in the pool, and at the edge of memory both would not fit.
  ReleaseCachedMemory(device);
  size.inputs = inputs.clone();  // outside the pool: they live as long as the graph
  size.targets = targets.clone();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  bool capturing = false;
  try {
    // Thread-local: other threads (autograd's, which runs backward onto this stream, and
    // NCCL's watchdog) keep the whole CUDA API while this one captures.
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    capturing = true;
    size.result = body_(size.inputs, size.targets);
    graph->capture_end();
    capturing = false;
  } catch (const std::exception& error) {
    if (capturing) AbandonCapture(*graph, pool_, device);
    std::cerr << "poplar-worker: capturing the CUDA graph of a micro-batch of " << inputs.size(0) << " samples failed ("
              << FirstLine(error.what()) << "); micro-batches of that size run eagerly\n";
    size = Size{};
    size.eager_only = true;
    graph.reset();
    ReleaseCachedMemory(device);
    return body_(inputs, targets);
  }
  size.graph = std::move(graph);
  size.graph->replay();  // the capture ran nothing: this micro-batch's work
  return size.result;
}

#else  // a libtorch without CUDA: nothing to capture

struct MicroBatchGraphs::Size {};

MicroBatchGraphs::MicroBatchGraphs(Body body) : body_(std::move(body)) {
  throw std::logic_error("MicroBatchGraphs: this poplar-worker was built without CUDA");
}

MicroBatchGraphs::~MicroBatchGraphs() = default;

bool MicroBatchGraphs::Replays(std::int64_t /*size*/) const { return false; }

torch::Tensor MicroBatchGraphs::Run(const torch::Tensor& inputs, const torch::Tensor& targets) {
  return body_(inputs, targets);
}

#endif

}  // namespace poplar
