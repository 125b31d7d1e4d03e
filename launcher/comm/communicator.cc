#include "launcher/comm/communicator.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
// POPLAR_WITH_GLOO: CMake found Gloo in libtorch (USE_C10D_GLOO) and Gloo's headers
// (launcher/CMakeLists.txt). Without them the worker builds for NCCL alone
// (UsableBackend refuses Gloo).
#ifdef POPLAR_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <nlohmann/json.hpp>

#include "planner/base/host_port.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/local_address.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

// Gloo (libtorch 1.13) has no bf16 type. Collectives that only move bits (all-gather,
// all-to-all) send bf16 as fp16 of the same width; other types go as they are.
torch::Tensor AsGlooBits(const torch::Tensor& tensor) {
  return tensor.scalar_type() == torch::kBFloat16 ? tensor.view(torch::kHalf) : tensor;
}

// Waits for `work`, a `collective` of the job's ranks. Its failure is said in a user's
// terms: a peer rank gone (its connection closed or reset: that rank's own error says
// why), or not every rank there within --timeout; then the first line of c10d's words,
// without Gloo's source location ("[./gloo/transport/tcp/pair.cc:598] ").
void WaitForWork(c10d::Work& work, const char* collective) {
  try {
    work.wait();
  } catch (const std::exception& error) {
    std::string cause = FirstLine(error.what());
    if (cause.rfind("[", 0) == 0 && cause.find("] ") != std::string::npos) cause = cause.substr(cause.find("] ") + 2);
    const auto says = [&cause](const char* words) { return cause.find(words) != std::string::npos; };
    const std::string failed = std::string("the ") + collective + " failed: ";
    if (says("closed by peer") || says("reset by peer") || says("Broken pipe") || says("Connection refused")) {
      throw PeerFailure(failed + "another rank left the job (its own output says why); " + cause);
    }
    if (SaysTimedOut(cause)) {
      throw PeerFailure(failed + "not every rank took part within --timeout (a rank stopped or is stuck); " + cause);
    }
    throw std::runtime_error(failed + cause);
  }
}

}  // namespace

CollectiveBackend ParseCollectiveBackend(const std::string& name, const std::string& flag) {
  if (name == "auto") return CollectiveBackend::kAuto;
  if (name == "gloo") return CollectiveBackend::kGloo;
  if (name == "nccl") return CollectiveBackend::kNccl;
  throw InputError(flag, "", "must be auto, gloo or nccl, got '" + name + "'");
}

void Communicator::RequireAgreement(const std::string& what, const std::string& value) {
  if (rendezvous_) rendezvous_->RequireAgreement(what, value);
}

class Communicator::Timer {
 public:
  explicit Timer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Timer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

GlooReduceScatter GlooReduceScatterOfEnvironment() {
  const char* value = std::getenv("POPLAR_GLOO_REDUCE_SCATTER");
  const std::string name = value == nullptr ? "alltoall" : value;
  if (name == "alltoall") return GlooReduceScatter::kAllToAll;
  if (name == "allreduce") return GlooReduceScatter::kAllReduce;
  throw InputError("POPLAR_GLOO_REDUCE_SCATTER", "", "must be alltoall or allreduce, got '" + Printable(name) + "'");
}

const char* GlooReduceScatterName(GlooReduceScatter how) {
  return how == GlooReduceScatter::kAllReduce ? "allreduce" : "alltoall";
}

CollectiveBackend Communicator::UsableBackend(torch::Device device, CollectiveBackend backend, int world_size) {
  const bool explicit_backend = backend != CollectiveBackend::kAuto;
  if (backend == CollectiveBackend::kAuto) {
    backend = device.is_cuda() ? CollectiveBackend::kNccl : CollectiveBackend::kGloo;
  }
  if (backend == CollectiveBackend::kNccl && !device.is_cuda()) {
    throw InputError("--backend", "", "nccl carries CUDA tensors only; use gloo with --device cpu");
  }
#ifndef POPLAR_WITH_GLOO
  if (backend == CollectiveBackend::kGloo && (world_size > 1 || explicit_backend)) {
    throw InputError("--backend", "",
                     "gloo: this poplar-worker was built without Gloo (its libtorch has no "
                     "Gloo, or not its headers); use --backend nccl with --device cuda");
  }
#endif
#ifndef USE_C10D_NCCL
  if (backend == CollectiveBackend::kNccl && (world_size > 1 || explicit_backend)) {
    throw InputError("--backend", "",
                     "nccl: this libtorch was built without NCCL; use "
                     "--backend gloo, or build against a CUDA libtorch");
  }
#else
  (void)world_size;
  (void)explicit_backend;
#endif
  return backend;
}

Communicator::Communicator(const DistributedEnv& env, std::chrono::milliseconds timeout, torch::Device device,
                           CollectiveBackend backend, GlooReduceScatter gloo_reduce_scatter)
    : rank_(env.rank), world_size_(env.world_size), gloo_reduce_scatter_(gloo_reduce_scatter) {
  // A backend named explicitly gets a process group even for one rank, so that a
  // one-GPU machine can run the NCCL path (a one-rank NCCL communicator is valid).
  const bool explicit_backend = backend != CollectiveBackend::kAuto;
  backend = UsableBackend(device, backend, world_size_);
  if (world_size_ == 1 && !explicit_backend) return;
  rendezvous_.emplace(env, timeout);
  const c10::intrusive_ptr<c10d::Store> store = rendezvous_->store();

#ifdef USE_C10D_NCCL
  if (backend == CollectiveBackend::kNccl) {
    // Blocking waits make NCCL's timeout raise an error in wait() instead of leaving
    // the host blocked or the watchdog aborting the process, and hold the host until a
    // collective is done, as communication_seconds() counts it. Set whatever the
    // environment said: with 0 a dead peer would end the process through the watchdog
    // rather than as PeerFailure, and the waits would read as no communication at all.
    ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 1);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, world_size_, options);
    native_scatter_gather_ = true;
    return;
  }
#endif
#ifdef POPLAR_WITH_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(GlooDevice(env.master_addr));
  try {
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, world_size_, options);
  } catch (const std::exception& error) {
    // c10d says only "Socket Timeout" when a rank never joins.
    const std::string what = error.what();
    if (SaysTimedOut(what)) {
      throw PeerFailure(rendezvous_->Incomplete({}).what() + (" (" + FirstLine(what) + ")"));
    }
    throw;
  }
#endif
}

std::string Communicator::backend_name() const { return group_ ? group_->getBackendName() : "none"; }

#ifdef POPLAR_WITH_GLOO
std::shared_ptr<::gloo::transport::Device> Communicator::GlooDevice(const std::string& master_addr) {
  // The address Gloo listens on and gives its peers: GLOO_SOCKET_IFNAME's when set (as
  // torchrun), else the one this machine reaches rank 0 from, which the other ranks
  // reach it at too (loopback when the whole job is on this machine). Not the address
  // the host name resolves to: Debian maps it to 127.0.1.1, which no other node reaches.
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface && *interface) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  }
  if (const std::string local = LocalAddressToward(master_addr); !local.empty()) {
    return c10d::ProcessGroupGloo::createDeviceForHostname(local);
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

Communicator::~Communicator() {
#ifdef USE_C10D_NCCL
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(group_.get())) {
    // NCCL's communicators end here rather than at exit (libtorch 2.4+ warns otherwise):
    // shutdown() after a clean run; abort() while an error unwinds, so that nothing
    // waits for a collective that a failed peer will never join.
    try {
      if (std::uncaught_exceptions() > 0) {
        nccl->abort();
      } else {
        nccl->shutdown();
      }
    } catch (const std::exception& error) {
      std::fprintf(stderr, "poplar-worker: ending NCCL: %s\n", error.what());
    }
  }
#endif
}

PendingCollective::PendingCollective(Communicator& owner, const char* collective, c10::intrusive_ptr<c10d::Work> work,
                                     std::function<void()> finish, std::int64_t elements)
    : owner_(owner), collective_(collective), work_(std::move(work)), finish_(std::move(finish)), elements_(elements) {
  owner_.elements_in_flight_ += elements_;
  owner_.most_elements_in_flight_ = std::max(owner_.most_elements_in_flight_, owner_.elements_in_flight_);
}

PendingCollective::~PendingCollective() {
  if (done_) return;
  try {
    Wait();
  } catch (...) {
    // Already failing: the first error is the one reported.
  }
}

void PendingCollective::Wait() {
  if (done_) return;
  done_ = true;
  owner_.elements_in_flight_ -= elements_;
  Communicator::Timer timer(owner_.communication_seconds_);
  if (work_) WaitForWork(*work_, collective_);
  if (finish_) finish_();
}

std::unique_ptr<PendingCollective> Communicator::Pending(const char* collective, c10::intrusive_ptr<c10d::Work> work,
                                                         std::function<void()> finish, std::int64_t elements) {
  return std::make_unique<PendingCollective>(*this, collective, std::move(work), std::move(finish), elements);
}

std::unique_ptr<PendingCollective> Communicator::StartAllReduceSum(torch::Tensor& tensor) {
  // All-reduces are not counted in flight (communicator.h).
  if (!group_) return Pending("all-reduce", {}, nullptr, 0);
  volume_.all_reduced += tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
  if (!native_scatter_gather_ && tensor.scalar_type() == torch::kBFloat16) {
    // Gloo (libtorch 1.13) cannot add bf16: reduce an fp32 copy.
    std::vector<torch::Tensor> wide = {tensor.to(torch::kFloat32)};
    auto work = group_->allreduce(wide);
    return Pending(
        "all-reduce", work, [wide, tensor]() mutable { tensor.copy_(wide[0]); }, 0);
  }
  std::vector<torch::Tensor> tensors = {tensor};
  return Pending("all-reduce", group_->allreduce(tensors), nullptr, 0);
}

bool Communicator::Uneven(const Chunks& chunks, std::int64_t whole, std::int64_t own) const {
  if (chunks.empty()) return false;
  TORCH_CHECK(static_cast<int>(chunks.size()) == world_size_ || !group_, "collective: ", chunks.size(), " chunks for ",
              world_size_, " ranks");
  std::int64_t sum = 0;
  for (const std::int64_t chunk : chunks) sum += chunk;
  TORCH_CHECK(sum == whole && chunks[rank_] == own, "collective: chunk sizes do not match the tensors");
  return std::any_of(chunks.begin(), chunks.end(), [&](std::int64_t chunk) { return chunk != chunks[0]; });
}

std::unique_ptr<PendingCollective> Communicator::StartAllToAllReduceScatter(const torch::Tensor& input,
                                                                            torch::Tensor& output,
                                                                            const Chunks& chunks) {
  // Chunk r of every rank's input goes to rank r (chunks[r] elements; equal chunks when
  // empty), which adds what it receives; on Gloo bf16 travels as its bits and is added in
  // fp32, rounded once, as the all-reduce did.
  const auto own = output.numel();
  const bool bits = !native_scatter_gather_;
  const bool bf16 = input.scalar_type() == torch::kBFloat16;
  auto source = input.contiguous();
  auto wire = bits ? AsGlooBits(source) : source;
  auto received = torch::empty({world_size_ * own}, wire.options());
  Chunks send = chunks;  // (c10d takes the split sizes by non-const reference)
  Chunks receive = chunks.empty() ? Chunks{} : Chunks(world_size_, own);
  auto work = group_->alltoall_base(received, wire, receive, send);
  const int world = world_size_;
  // `source` rides along so that the input lives until the all-to-all is done.
  return Pending(
      "reduce-scatter", work,
      [source, received, output, world, own, bf16, bits]() mutable {
        auto rows = (bf16 && bits ? received.view(torch::kBFloat16) : received).view({world, own});
        output.copy_(bf16 ? rows.to(torch::kFloat32).sum(0) : rows.sum(0));
      },
      input.numel());
}

std::unique_ptr<PendingCollective> Communicator::StartAllToAllGather(const torch::Tensor& shard, torch::Tensor& output,
                                                                     const Chunks& chunks) {
  // Sends this rank's chunk to every rank and receives chunk r from rank r: c10d's Gloo
  // all-gather takes equal chunks only. The send buffer holds a copy of the chunk per rank
  // (all-to-all reads one region per peer).
  const bool bits = !native_scatter_gather_;
  auto copies = shard.contiguous().repeat({world_size_});
  auto wire = bits ? AsGlooBits(copies) : copies;
  auto target = bits ? AsGlooBits(output) : output;
  Chunks send(world_size_, shard.numel());
  Chunks receive = chunks;
  auto work = group_->alltoall_base(target, wire, receive, send);
  return Pending(
      "all-gather", work, [copies]() {}, output.numel());
}

std::unique_ptr<PendingCollective> Communicator::StartReduceScatterSum(const torch::Tensor& input,
                                                                       torch::Tensor& output, const Chunks& chunks) {
  const auto chunk = output.numel();
  const bool uneven = Uneven(chunks, input.numel(), chunk);
  TORCH_CHECK(!chunks.empty() || input.numel() == chunk * world_size_, "ReduceScatterSum: sizes do not match");
  const auto whole = input.numel();
  if (!group_) {
    return Pending(
        "reduce-scatter", {}, [input, output, chunk]() mutable { output.copy_(input.narrow(0, 0, chunk)); }, whole);
  }
  volume_.reduce_scattered += whole * static_cast<std::int64_t>(input.element_size());
  if (uneven) return StartAllToAllReduceScatter(input, output, chunks);
  if (native_scatter_gather_) {
    auto source = input.contiguous();
    return Pending("reduce-scatter", group_->_reduce_scatter_base(output, source), nullptr, whole);
  }
  if (gloo_reduce_scatter_ == GlooReduceScatter::kAllToAll) return StartAllToAllReduceScatter(input, output, {});
  // A copy (fp32 for bf16, which Gloo cannot add) is all-reduced and the slice kept.
  const auto wide = input.scalar_type() == torch::kBFloat16 ? torch::kFloat32 : input.scalar_type();
  std::vector<torch::Tensor> tensors = {input.to(wide, /*non_blocking=*/false, /*copy=*/true)};
  auto work = group_->allreduce(tensors);
  const int rank = rank_;
  return Pending(
      "reduce-scatter", work,
      [summed = tensors[0], output, rank, chunk]() mutable { output.copy_(summed.narrow(0, rank * chunk, chunk)); },
      whole);
}

std::unique_ptr<PendingCollective> Communicator::StartAllGather(const torch::Tensor& shard, torch::Tensor& output,
                                                                const Chunks& chunks) {
  const auto chunk = shard.numel();
  const bool uneven = Uneven(chunks, output.numel(), chunk);
  TORCH_CHECK(!chunks.empty() || output.numel() == chunk * world_size_, "AllGather: sizes do not match");
  const auto whole = output.numel();
  if (!group_) {
    return Pending(
        "all-gather", {},
        [shard, output, chunk, whole]() mutable {
          output.narrow(0, 0, chunk).copy_(shard);
          output.narrow(0, chunk, whole - chunk).zero_();  // the absent ranks' chunks, if any
        },
        whole);
  }
  volume_.all_gathered += whole * static_cast<std::int64_t>(output.element_size());
  if (uneven) return StartAllToAllGather(shard, output, chunks);
  auto source = shard.contiguous();
  if (native_scatter_gather_) return Pending("all-gather", group_->_allgather_base(output, source), nullptr, whole);
  source = AsGlooBits(source);
  auto target = AsGlooBits(output);
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < world_size_; ++r) outputs[0].push_back(target.narrow(0, r * chunk, chunk));
  std::vector<torch::Tensor> inputs = {source};
  return Pending("all-gather", group_->allgather(outputs, inputs), nullptr, whole);
}

void Communicator::AllReduceSum(torch::Tensor& tensor) { StartAllReduceSum(tensor)->Wait(); }

void Communicator::ReduceScatterSum(const torch::Tensor& input, torch::Tensor& output, const Chunks& chunks) {
  StartReduceScatterSum(input, output, chunks)->Wait();
}

void Communicator::AllGather(const torch::Tensor& shard, torch::Tensor& output, const Chunks& chunks) {
  StartAllGather(shard, output, chunks)->Wait();
}

void Communicator::Broadcast(torch::Tensor& tensor, int root) {
  if (!group_) return;
  Timer timer(communication_seconds_);
  std::vector<torch::Tensor> tensors = {tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  WaitForWork(*group_->broadcast(tensors, options), "broadcast");
}

void Communicator::Barrier() {
  if (!group_) return;
  Timer timer(communication_seconds_);
  WaitForWork(*group_->barrier(), "barrier");
}

}  // namespace poplar
