// Communicator: the collectives the ZeRO engine needs, over a c10d process group.
//
// Ranks rendezvous through a c10d TCPStore hosted by rank 0 (torchrun's MASTER_ADDR and
// MASTER_PORT); collectives run on c10d's Gloo process group for CPU tensors and on its
// NCCL process group for CUDA tensors (compiled only where libtorch has NCCL:
// USE_C10D_NCCL). Gloo can also carry CUDA tensors (through host memory), which lets
// several ranks share one GPU, as NCCL does not allow: Backend::kGloo. Every
// collective and the rendezvous have a timeout, so a dead peer ends the job with an
// error instead of a hang. With one rank and the backend left to kAuto no process group
// is created and every collective is the identity; a backend named explicitly gets a
// one-rank group, so that its path runs (and can be tested) on one device.
//
// Tensors are 1-D and contiguous. Not thread-safe: one caller (the training loop).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/base/command_failed.h"

namespace c10d {
class Backend;
class ProcessGroup;
class Store;
class Work;
}  // namespace c10d
namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace poplar {

// The torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
// Without WORLD_SIZE the process is rank 0 of 1. Throws InputError naming the variable.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;

  static DistributedEnv FromEnvironment();
};

class Communicator;

// Which c10d process group carries the collectives. kAuto: NCCL for CUDA tensors, Gloo
// for CPU tensors.
enum class CollectiveBackend { kAuto, kGloo, kNccl };
// "auto", "gloo" or "nccl"; throws InputError naming `flag` otherwise.
CollectiveBackend ParseCollectiveBackend(const std::string& name, const std::string& flag);

// How a reduce-scatter runs on Gloo, which has none of its own (libtorch 1.13 refuses
// it; libtorch 2's all-reduces a copy). kAllToAll: each rank sends input chunk r to rank
// r and adds the chunks it receives: (N-1)/N of the input on the wire, a ring
// reduce-scatter's volume, and bf16 travels as bf16. kAllReduce: the former emulation,
// an all-reduce of a copy (fp32 for bf16) whose chunk is kept: twice the bytes, kept for
// comparison (scripts/bench-reduce-scatter). NCCL always reduce-scatters natively.
enum class GlooReduceScatter { kAllToAll, kAllReduce };
// "alltoall" or "allreduce"; throws InputError naming `flag` otherwise.
GlooReduceScatter ParseGlooReduceScatter(const std::string& name, const std::string& flag);

// A collective started without waiting (it runs on the process group's threads while
// the caller computes). Wait() blocks until it is done, then runs its finishing step;
// the time blocked counts as exposed communication. Destroying an unfinished one waits.
// A collective that fails says which it was and why in a user's terms (WaitForWork).
class PendingCollective {
 public:
  PendingCollective(Communicator& owner, const char* collective, c10::intrusive_ptr<c10d::Work> work,
                    std::function<void()> finish);
  ~PendingCollective();
  PendingCollective(const PendingCollective&) = delete;
  PendingCollective& operator=(const PendingCollective&) = delete;
  void Wait();

 private:
  Communicator& owner_;
  const char* collective_;  // "all-reduce", ...
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> finish_;
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

  // Asynchronous forms: the tensors must stay alive, and untouched, until Wait().
  std::unique_ptr<PendingCollective> StartAllReduceSum(torch::Tensor& tensor);
  std::unique_ptr<PendingCollective> StartReduceScatterSum(const torch::Tensor& input, torch::Tensor& output);
  std::unique_ptr<PendingCollective> StartAllGather(const torch::Tensor& shard, torch::Tensor& output);

  // In place: every rank ends with the element-wise sum.
  void AllReduceSum(torch::Tensor& tensor);
  // input: world_size * k elements; output: k elements, the sum over ranks of input's
  // rank()-th chunk. (NCCL reduce-scatters natively; on Gloo see GlooReduceScatter.)
  void ReduceScatterSum(const torch::Tensor& input, torch::Tensor& output);
  // shard: k elements; output: world_size * k elements, chunk r from rank r.
  void AllGather(const torch::Tensor& shard, torch::Tensor& output);
  // In place: every rank ends with rank `root`'s values.
  void Broadcast(torch::Tensor& tensor, int root = 0);
  void Barrier();
  // Throws InputError on every rank unless all ranks pass the same `value` for `what`
  // (for example the plan, the model, the flags that decide which collectives run).
  // Ranks that disagree would otherwise deadlock or silently diverge. When `value` is a
  // JSON object, the error names the first key whose values differ, with both values.
  // Waits at most --timeout for the others' values, then names the ranks that sent
  // none. (Only the rendezvous heeds its ending: ranks that met train on whatever a
  // late process sets, such as a third RANK given twice.)
  void RequireAgreement(const std::string& what, const std::string& value);

  // The backend that carries `device`'s tensors for `backend` (auto: NCCL for CUDA, else
  // Gloo). Throws InputError naming --backend when this build cannot (nccl with the CPU,
  // nccl without NCCL): called by each rank before it meets the others, so that its error
  // reaches them, and by the constructor.
  static CollectiveBackend UsableBackend(torch::Device device, CollectiveBackend backend, int world_size);

  // For a rank that stops before its rendezvous (a bad flag, file or plan of its own):
  // tells the ranks waiting at rank 0's store why, so that they stop at once, naming it,
  // rather than wait out --timeout for a rank that "never joined". Best effort, for at
  // most `within`: a rank other than 0 tries to reach rank 0's store (a rank 0 not yet
  // there, still loading, or gone is told nothing, and waits out its own --timeout);
  // rank 0 hosts the store for the message alone and waits until every other rank has
  // read it (one that comes later says it cannot reach rank 0).
  static void TellTheOthersThisRankStopped(const DistributedEnv& env, const std::string& reason,
                                           std::chrono::milliseconds within);

  // Runs `setup`, a rank's work before its rendezvous, and returns what it returns; if it
  // throws, tells the others why (above) and rethrows. A rank other than 0 tries for 3 s,
  // which its own error waits for: long enough for a rank 0 started with it to be
  // listening, short when rank 0 stopped too (the same typo on every rank). Rank 0 waits
  // up to 30 s for the others to read it: they may still be loading, and a GPU's start-up
  // takes seconds. Neither waits beyond `timeout` (--timeout).
  template <typename Setup>
  static auto BeforeRendezvous(const DistributedEnv& env, std::chrono::seconds timeout, Setup&& setup) {
    try {
      return setup();
    } catch (const std::exception& error) {
      TellTheOthersThisRankStopped(
          env, error.what(),
          std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(env.rank == 0 ? 30 : 3)));
      throw;
    }
  }

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

 private:
  class Timer;
  friend class PendingCollective;
  static std::shared_ptr<::gloo::transport::Device> GlooDevice(const std::string& master_addr);
  // Every rank announces itself in the store, with its WORLD_SIZE, and waits, at most
  // `timeout` in all, until every rank has; then the process group's own rendezvous does
  // not wait. Throws naming the ranks that never joined; a rank started with another
  // WORLD_SIZE (each rank compares with rank 0's; rank 0 with every rank's) or a RANK
  // given twice ends every rank's wait at once (EndRendezvous). The others then wait for
  // rank 0's word that all agree, so that none goes on while rank 0 may still end it.
  void WaitForEveryRank(const DistributedEnv& env, std::chrono::milliseconds timeout);
  // The error of a rendezvous that timed out: the ranks `missing` (none known: not all
  // joined).
  PeerFailure RendezvousIncomplete(const DistributedEnv& env, const std::vector<int>& missing) const;
  // Waits until every key in `keys` is in the store: true, or false at `deadline`. Polls
  // with check(), which never blocks (a wait() that times out may leave its answer in
  // the connection). During the rendezvous (`in_rendezvous`), throws the reason when a
  // rank has ended it.
  bool PollUntilSet(const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline,
                    bool in_rendezvous = true);
  // Ends the rendezvous for every rank still polling, with `for_the_others` as their
  // error, and throws `here` as this rank's. Rank 0 first waits (a few seconds at most)
  // until every other rank that joined knows, since the store ends with its process.
  [[noreturn]] void EndRendezvous(const std::string& here, const std::string& for_the_others);
  // A started collective (`work` null when nothing travels, with one rank) and what to
  // do once it is done.
  std::unique_ptr<PendingCollective> Pending(const char* collective, c10::intrusive_ptr<c10d::Work> work,
                                             std::function<void()> finish);

  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
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
};

}  // namespace poplar
