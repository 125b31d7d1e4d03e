// Rendezvous: how the ranks of a job meet, apart from the collectives that follow.
//
// Rank 0 hosts a c10d TCPStore at torchrun's MASTER_ADDR:MASTER_PORT; every rank joins
// it, announces itself with its WORLD_SIZE, and waits until every rank has, within
// --timeout, so that the process group's own rendezvous then does not wait. A rank that
// never joins, a WORLD_SIZE that differs or a RANK given twice ends every rank's wait at
// once, naming the cause. The same store then carries the ranks' agreement on the job's
// settings (RequireAgreement) and, for a rank that stops before it meets the others,
// the reason (TellTheOthersThisRankStopped). Communicator builds its process group on
// store().
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <string>
#include <vector>

#include "planner/base/command_failed.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace poplar {

// The torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
// Without WORLD_SIZE the process is rank 0 of 1. In a Slurm task (`srun`: SLURM_PROCID
// is set), RANK, WORLD_SIZE and LOCAL_RANK that are unset are Slurm's SLURM_PROCID,
// SLURM_NTASKS and SLURM_LOCALID; MASTER_ADDR and MASTER_PORT come from the launcher
// either way. Throws InputError naming the variable.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;

  static DistributedEnv FromEnvironment();
};

// Whether a c10d error's text says a wait ran out: "Timed out", "timed out", "Socket
// Timeout".
bool SaysTimedOut(const std::string& what);

class Rendezvous {
 public:
  // Meets every other rank of `env` (see above). Throws PeerFailure naming the ranks that
  // never joined within `timeout`, std::runtime_error for a WORLD_SIZE that differs or a
  // RANK given twice, InputError for a rank 0 whose MASTER_ADDR is not its machine's.
  Rendezvous(const DistributedEnv& env, std::chrono::milliseconds timeout);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  c10::intrusive_ptr<c10d::Store> store() const;

  // Throws InputError on every rank unless all ranks pass the same `value` for `what`
  // (for example the plan, the model, the flags that decide which collectives run).
  // Ranks that disagree would otherwise deadlock or silently diverge. When `value` is a
  // JSON object, the error names the first key whose values differ, with both values;
  // every rank reads every value before any ends on a difference (rank 0 holds the store).
  // Waits at most --timeout for the others' values, then names the ranks that sent
  // none. (Only the rendezvous heeds its ending: ranks that met train on whatever a
  // late process sets, such as a third RANK given twice.)
  void RequireAgreement(const std::string& what, const std::string& value);

  // The error of a rendezvous that timed out: the ranks `missing` (none known: not all
  // joined).
  PeerFailure Incomplete(const std::vector<int>& missing) const;

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
  static auto Before(const DistributedEnv& env, std::chrono::seconds timeout, Setup&& setup) {
    try {
      return setup();
    } catch (const std::exception& error) {
      TellTheOthersThisRankStopped(
          env, error.what(),
          std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(env.rank == 0 ? 30 : 3)));
      throw;
    }
  }

 private:
  // Every rank announces itself in the store, with its WORLD_SIZE, and waits, at most
  // `timeout` in all, until every rank has; then the process group's own rendezvous does
  // not wait. Throws naming the ranks that never joined; a rank started with another
  // WORLD_SIZE (each rank compares with rank 0's; rank 0 with every rank's) or a RANK
  // given twice ends every rank's wait at once (EndRendezvous). The others then wait for
  // rank 0's word that all agree, so that none goes on while rank 0 may still end it.
  void WaitForEveryRank(std::chrono::milliseconds timeout);
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

  DistributedEnv env_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace poplar
