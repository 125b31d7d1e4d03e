// Communicator: the collectives the ZeRO engine needs, over a c10d process group.
//
// Ranks meet through a Rendezvous (rendezvous.h) at rank 0's store; collectives run on c10d's Gloo process group for
// CPU tensors and on its NCCL process group for CUDA tensors (compiled only where libtorch has NCCL: USE_C10D_NCCL).
// Gloo can also carry CUDA tensors (through host memory), which lets several ranks share one GPU, as NCCL does not
// allow: Backend::kGloo. Every collective and the rendezvous have a timeout, so a dead peer ends the job with an error
// instead of a hang. With one rank and the backend left to kAuto no process group is created and every collective is
// the identity; a backend named explicitly gets a one-rank group, so that its path runs (and can be tested) on one
// device.
//
// Tensors are 1-D and contiguous. Not thread-safe: one caller (the training loop).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "launcher/comm/rendezvous.h"
#include "planner/base/command_failed.h"

namespace c10d {
class Backend;
class ProcessGroup;
class Work;
}  // namespace c10d
namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace poplar {

class Communicator;

// Which c10d process group carries the collectives. kAuto: NCCL for CUDA tensors, Gloo
// for CPU tensors.
enum class CollectiveBackend { kAuto, kGloo, kNccl };
// "auto", "gloo" or "nccl"; throws InputError naming `flag` otherwise.
CollectiveBackend ParseCollectiveBackend(const std::string& name, const std::string& flag);

// How a reduce-scatter runs on Gloo, which has none of its own (libtorch 1.13 refuses
// it; libtorch 2's all-reduces a copy). kAllToAll: each rank sends input chunk r to rank
// r and adds the chunks it receives: (N-1)/N of the input on the wire, a ring
// reduce-scatter's volume, and bf16 travels as bf16. kAllReduce: an all-reduce of a copy
// (fp32 for bf16) whose chunk is kept: twice the bytes, the baseline that
// scripts/bench-reduce-scatter compares against. NCCL always reduce-scatters natively.
enum class GlooReduceScatter { kAllToAll, kAllReduce };
// The environment's choice: POPLAR_GLOO_REDUCE_SCATTER=allreduce for kAllReduce (for the
// benchmark and the tests that compare both), unset or "alltoall" for kAllToAll. Throws
// InputError naming the variable for any other value.
GlooReduceScatter GlooReduceScatterOfEnvironment();
const char* GlooReduceScatterName(GlooReduceScatter how);  // "alltoall" or "allreduce"

// A collective started without waiting (it runs on the process group's threads while
// the caller computes). Wait() blocks until it is done, then runs its finishing step;
// the time blocked counts as exposed communication. Destroying an unfinished one waits.
// A collective that fails says which it was and why in a user's terms (WaitForWork).
class PendingCollective {
 public:
  PendingCollective(Communicator& owner, const char* collective, c10::intrusive_ptr<c10d::Work> work,
                    std::function<void()> finish, std::int64_t elements);
  ~PendingCollective();
  PendingCollective(const PendingCollective&) = delete;
  PendingCollective& operator=(const PendingCollective&) = delete;
  void Wait();

 private:
  Communicator& owner_;
  const char* collective_;  // "all-reduce", ...
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> finish_;
  std::int64_t elements_;  // counted in the owner's elements_in_flight until Wait
  bool done_ = false;
};

class Communicator {
 public:
  // Rendezvous and create the process group for tensors on `device` (world_size > 1).
  // Throws on timeout, and InputError for NCCL without a CUDA device or without a
  // libtorch built with it.
  Communicator(const DistributedEnv& env, std::chrono::milliseconds timeout, torch::Device device = torch::kCPU,
               CollectiveBackend backend = CollectiveBackend::kAuto,
               GlooReduceScatter gloo_reduce_scatter = GlooReduceScatter::kAllToAll);
  ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // What carries the collectives: "gloo", "nccl", or "none" (one rank, no group).
  std::string backend_name() const;

  // Every rank's chunk of a reduce-scatter's input or an all-gather's output, in rank
  // order, adding up to its size (ZeRO's uneven state shares); empty: world_size equal
  // chunks. Uneven chunks travel as one all-to-all with per-rank counts (Gloo: pairwise
  // exchange; NCCL: grouped send and receive), whose pace the largest chunk sets, on Gloo
  // whatever GlooReduceScatter says; equal ones as below.
  //
  // A rank alone (no group) may be given several chunks: it stands for rank 0 of that
  // many, the others absent (flat_layout.h, LayoutWorldSize). It keeps chunk 0 of a
  // reduce-scatter, and its all-gather leaves the other chunks zero; it allocates no
  // buffer of the Gloo path's (elements_in_flight says how large they would be).
  using Chunks = std::vector<std::int64_t>;

  // Asynchronous forms: the tensors must stay alive, and untouched, until Wait().
  std::unique_ptr<PendingCollective> StartAllReduceSum(torch::Tensor& tensor);
  std::unique_ptr<PendingCollective> StartReduceScatterSum(const torch::Tensor& input, torch::Tensor& output,
                                                           const Chunks& chunks = {});
  std::unique_ptr<PendingCollective> StartAllGather(const torch::Tensor& shard, torch::Tensor& output,
                                                    const Chunks& chunks = {});

  // In place: every rank ends with the element-wise sum.
  void AllReduceSum(torch::Tensor& tensor);
  // input: world_size * k elements (or the sum of `chunks`); output: k elements (or
  // chunks[rank()]), the sum over ranks of input's rank()-th chunk. (NCCL reduce-scatters
  // equal chunks natively; on Gloo see GlooReduceScatter.)
  void ReduceScatterSum(const torch::Tensor& input, torch::Tensor& output, const Chunks& chunks = {});
  // shard: k elements (or chunks[rank()]); output: world_size * k elements (or the sum
  // of `chunks`), chunk r from rank r.
  void AllGather(const torch::Tensor& shard, torch::Tensor& output, const Chunks& chunks = {});
  // In place: every rank ends with rank `root`'s values.
  void Broadcast(torch::Tensor& tensor, int root = 0);
  void Barrier();
  // Rendezvous::RequireAgreement over this job's rendezvous (nothing to agree on alone).
  void RequireAgreement(const std::string& what, const std::string& value);
  // The backend that carries `device`'s tensors for `backend` (auto: NCCL for CUDA, else
  // Gloo). Throws InputError naming --backend when this build cannot (nccl with the CPU,
  // nccl without NCCL): called by each rank before it meets the others, so that its error
  // reaches them, and by the constructor.
  static CollectiveBackend UsableBackend(torch::Device device, CollectiveBackend backend, int world_size);

  // Wall time spent waiting for collectives since construction: the communication that
  // was not hidden behind computation.
  double communication_seconds() const { return communication_seconds_; }

  // Bytes handed to the training collectives (all-reduce, reduce-scatter, all-gather;
  // not the start-up Broadcast) since construction, counted when more than one rank
  // takes part: the payload (an all-reduce's tensor, a reduce-scatter's input,
  // an all-gather's output, in the caller's type), not what crosses the wire (a ring
  // moves (N-1)/N of it per rank; docs/cost-model.md).
  struct Volume {
    std::int64_t all_reduced = 0;
    std::int64_t reduce_scattered = 0;
    std::int64_t all_gathered = 0;
    // What was handed over since the reading `earlier`.
    Volume Since(const Volume& earlier) const {
      return {all_reduced - earlier.all_reduced, reduce_scattered - earlier.reduce_scattered,
              all_gathered - earlier.all_gathered};
    }
  };
  const Volume& volume() const { return volume_; }

  // The elements of the reduce-scatters' inputs and the all-gathers' outputs started and
  // not yet waited for (all-reduces are not counted), with any number of ranks, the rank
  // alone included. While one is in flight a rank of N holding the fraction f of it holds
  // a buffer of N·f of its elements in the working type on Gloo (the all-to-all receives
  // a chunk of its own size from every rank; Gloo's all-gather gathers into a flat buffer
  // of one chunk per rank; uneven chunks send a copy of the rank's chunk per rank), and
  // on NCCL with uneven chunks; none on NCCL with equal ones. The memory model adds them
  // from the largest count a profile saw (docs/cost-model.md).
  std::int64_t elements_in_flight() const { return elements_in_flight_; }
  // The largest elements_in_flight since construction or the last ResetMostElementsInFlight.
  std::int64_t most_elements_in_flight() const { return most_elements_in_flight_; }
  void ResetMostElementsInFlight() { most_elements_in_flight_ = elements_in_flight_; }

 private:
  class Timer;
  friend class PendingCollective;
  static std::shared_ptr<::gloo::transport::Device> GlooDevice(const std::string& master_addr);
  // A started collective (`work` null when nothing travels, with one rank) and what to
  // do once it is done.
  // `elements` count in elements_in_flight until Wait.
  std::unique_ptr<PendingCollective> Pending(const char* collective, c10::intrusive_ptr<c10d::Work> work,
                                             std::function<void()> finish, std::int64_t elements);
  // Uneven `chunks` checked against the tensors' sizes (TORCH_CHECK; one per rank, or any
  // number for a rank alone): true when they differ, false when empty or all equal (the
  // equal-chunk paths serve).
  bool Uneven(const Chunks& chunks, std::int64_t whole, std::int64_t own) const;
  // The reduce-scatter and all-gather as one all-to-all each: Gloo's reduce-scatter
  // (GlooReduceScatter::kAllToAll, `chunks` empty) and uneven chunks on either backend.
  std::unique_ptr<PendingCollective> StartAllToAllReduceScatter(const torch::Tensor& input, torch::Tensor& output,
                                                                const Chunks& chunks);
  std::unique_ptr<PendingCollective> StartAllToAllGather(const torch::Tensor& shard, torch::Tensor& output,
                                                         const Chunks& chunks);

  int rank_;
  int world_size_;
  std::optional<Rendezvous> rendezvous_;  // none for one rank without a process group
  // The collectives' implementation: a c10d::Backend from libtorch 2 on, where a
  // ProcessGroup dispatches to backends; the ProcessGroup itself in libtorch 1.x.
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Backend> group_;
#else
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
#endif
  bool native_scatter_gather_ = false;  // the group has _reduce_scatter_base/_allgather_base
  GlooReduceScatter gloo_reduce_scatter_ = GlooReduceScatter::kAllToAll;
  double communication_seconds_ = 0;
  Volume volume_;
  std::int64_t elements_in_flight_ = 0;
  std::int64_t most_elements_in_flight_ = 0;
};

}  // namespace poplar
