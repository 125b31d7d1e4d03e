#include "launcher/comm/rendezvous.h"

#include <c10/util/Logging.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "planner/base/host_port.h"
#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

// The rendezvous store's server: libtorch 2.4+ asks for its libuv backend by default,
// which builds without libuv (Debian's, some wheels) refuse at start. The classic
// backend is in every libtorch and serves a job's few ranks as well. Options without
// the field (libtorch before 2.2) have only the classic one.
template <typename Options>
auto UseClassicStoreServer(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <typename Options>
void UseClassicStoreServer(Options& /*options*/, long) {}

// While it lives, c10d does not log its errors: a store it cannot reach is logged on
// stderr ("E... socket.cpp:860] [c10d] The client socket has timed out after 3s ...")
// before the exception that this rank reports in its own words (and, in TellTheOthers-
// ThisRankStopped, after the rank's own error). Held while the rendezvous's store is
// reached (or, stopping before the rendezvous, hosted for its message); the errors of
// training itself are logged as libtorch does.
class QuietC10dErrors {
 public:
  QuietC10dErrors() : saved_(FLAGS_caffe2_log_level) { FLAGS_caffe2_log_level = 3; }  // fatal ones only
  ~QuietC10dErrors() { FLAGS_caffe2_log_level = saved_; }
  QuietC10dErrors(const QuietC10dErrors&) = delete;
  QuietC10dErrors& operator=(const QuietC10dErrors&) = delete;

 private:
  int saved_;
};

int IntegerVariable(const char* name, int fallback, int low, int high) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  // Set but empty (RANK=) or padded (' 1') is a mistake in a script, not the default.
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  const bool digits = *text != '\0' && (std::isdigit(static_cast<unsigned char>(*text)) || *text == '-');
  if (!digits || *end != '\0' || value < low || value > high) {
    throw InputError(
        std::string("environment ") + name, "",
        "must be an integer from " + std::to_string(low) + " to " + std::to_string(high) + ", got '" + text + "'");
  }
  return static_cast<int>(value);
}

}  // namespace

// c10d's words for a wait that ran out: "Timed out", "timed out", "Socket Timeout".
bool SaysTimedOut(const std::string& what) {
  return what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
}

DistributedEnv DistributedEnv::FromEnvironment() {
  DistributedEnv env;
  // Each torchrun variable, or in a Slurm task its Slurm counterpart.
  const bool slurm_task = std::getenv("SLURM_PROCID") != nullptr;
  const auto variable = [&](const char* name, const char* slurm_name) {
    return std::getenv(name) != nullptr || !slurm_task ? name : slurm_name;
  };
  env.world_size = IntegerVariable(variable("WORLD_SIZE", "SLURM_NTASKS"), 1, 1, 1 << 20);
  env.rank = IntegerVariable(variable("RANK", "SLURM_PROCID"), 0, 0, env.world_size - 1);
  env.local_rank = IntegerVariable(variable("LOCAL_RANK", "SLURM_LOCALID"), 0, 0, 1 << 20);
  env.master_port = IntegerVariable("MASTER_PORT", 29500, 1, 65535);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr) {
    if (*addr == '\0') throw InputError("environment MASTER_ADDR", "", "is set but empty");
    env.master_addr = addr;
  }
  if (env.world_size > 1 && std::getenv("MASTER_PORT") == nullptr) {
    throw InputError("environment MASTER_PORT", "", "must be set when WORLD_SIZE > 1");
  }
  // A MASTER_ADDR that names no machine was found out only at --timeout, in c10d's words;
  // here, before the rank loads anything.
  if (const std::string problem = env.world_size > 1 ? UnresolvableHostProblem(env.master_addr) : "";
      !problem.empty()) {
    throw InputError("environment MASTER_ADDR", "",
                     "'" + Printable(env.master_addr) + "' names no machine (" + problem + ")");
  }
  return env;
}

Rendezvous::Rendezvous(const DistributedEnv& env, std::chrono::milliseconds timeout)
    : env_(env), rank_(env.rank), world_size_(env.world_size), timeout_(timeout) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = rank_ == 0;
  store_options.numWorkers = world_size_;
  // The store's own wait for its workers gives up silently in libtorch 1.13, after which
  // Gloo waited a second --timeout; WaitForEveryRank waits once, and names who is missing.
  store_options.waitWorkers = false;
  store_options.timeout = timeout;
  UseClassicStoreServer(store_options, 0);
  // Rank 0 hosts the store on every address of its machine and joins it through
  // MASTER_ADDR: another machine's address would reach whatever listens there, or no one.
  if (rank_ == 0 && !CouldBeThisMachine(env.master_addr)) {
    throw InputError("environment MASTER_ADDR", "",
                     env.master_addr + " is not an address of this machine; rank 0 " +
                         "hosts the rendezvous, so MASTER_ADDR must name rank 0's " +
                         "machine (127.0.0.1 when every rank runs here)");
  }
  try {
    const QuietC10dErrors quiet;
    store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& error) {
    // c10d's message lists every address it tried; the cause fits in a few words.
    const std::string what = error.what();
    if (rank_ == 0 && what.find("Address already in use") != std::string::npos) {
      throw std::runtime_error("rank 0 cannot host the rendezvous: port " + std::to_string(env.master_port) +
                               " (MASTER_PORT) is in use on this node");
    }
    // A rank other than 0 that never reached rank 0's store ("The client socket has
    // timed out after 10s while trying to connect to (127.0.0.1, 29615).").
    if (rank_ != 0 && SaysTimedOut(what)) {
      throw PeerFailure(
          "cannot reach rank 0's rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) +
          " within --timeout; is rank 0 started, with the same MASTER_ADDR and MASTER_PORT? (" + FirstLine(what) + ")");
    }
    throw;
  }
  WaitForEveryRank(timeout);
}

Rendezvous::~Rendezvous() = default;

c10::intrusive_ptr<c10d::Store> Rendezvous::store() const { return store_; }

namespace {

constexpr const char* kEndedKey = "poplar/rendezvous-ended";
// Set by rank 0 once every rank has joined with its WORLD_SIZE: the others wait for it,
// so that none goes on to the process group's rendezvous while rank 0 may still end it.
constexpr const char* kAgreedKey = "poplar/rendezvous-agreed";
// The longest rank 0 keeps the store up for ranks that have not yet read the end.
constexpr std::chrono::seconds kEndedLinger{5};

std::string StartedKey(int rank) { return "poplar/started/" + std::to_string(rank); }
// Rank `rank` knows the rendezvous ended (it read why, or ended it itself).
std::string KnownKey(int rank) { return "poplar/rendezvous-ended-known/" + std::to_string(rank); }

void SetText(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
}

std::string GetText(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

// Once `rank` knows the rendezvous ended. A rank other than 0 says so (KnownKey). Rank 0,
// whose process holds the store, waits until every other rank below `world_size` has
// said so, or `until`, since a store gone mid-read is a connection error naming nothing;
// with `started_only`, a rank that has not started its rendezvous is not waited for (one
// that comes later says it cannot reach rank 0). Best effort: a store already gone is
// this rank's to ignore, its own error says what is wrong.
void AfterTheEnd(c10d::Store& store, int rank, int world_size, bool started_only,
                 std::chrono::steady_clock::time_point until) {
  try {
    if (rank != 0) {
      SetText(store, KnownKey(rank), "1");
      return;
    }
    for (int other = 1; other < world_size;) {
      if (store.check({KnownKey(other)}) || (started_only && !store.check({StartedKey(other)}))) {
        ++other;
        continue;
      }
      if (std::chrono::steady_clock::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const std::exception&) {
    // The store went with rank 0 (or rank 0 could no longer serve): nothing to wait for.
  }
}

}  // namespace

bool Rendezvous::PollUntilSet(const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline,
                              bool in_rendezvous) {
  std::chrono::milliseconds pause(5);
  while (true) {
    if (store_->check(keys)) return true;
    if (in_rendezvous && store_->check({kEndedKey})) {
      const std::string reason = GetText(*store_, kEndedKey);
      AfterTheEnd(*store_, rank_, world_size_, /*started_only=*/true, std::chrono::steady_clock::now() + kEndedLinger);
      throw PeerFailure(reason);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

void Rendezvous::TellTheOthersThisRankStopped(const DistributedEnv& env, const std::string& reason,
                                              std::chrono::milliseconds within) {
  if (env.world_size == 1) return;
  // So that a user who started rank 0 by hand knows why it lingers (its error is printed
  // before this, for a refused command line, or after it). Another rank waits for rank 0
  // to be listening, which it mostly is: it stays silent, one error line.
  if (env.rank == 0 && within >= std::chrono::seconds(5)) {
    std::cerr << "poplar-worker[rank " << env.rank << "]: stopping before the rendezvous; first telling the other "
              << "ranks why (up to " << std::chrono::duration_cast<std::chrono::seconds>(within).count()
              << " s, less once they know)" << std::endl;
  }
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0;  // rank 0 hosts the store for this message alone
  store_options.numWorkers = env.world_size;
  store_options.waitWorkers = false;
  store_options.timeout = within;
  UseClassicStoreServer(store_options, 0);
  const std::string message = "rank " + std::to_string(env.rank) + " stopped before the rendezvous: " + reason;
  try {
    const QuietC10dErrors quiet;
    c10d::TCPStore store(env.master_addr, store_options);
    SetText(store, kEndedKey, message);
    // Rank 0 waits for every other rank, none of which has started its rendezvous yet.
    AfterTheEnd(store, env.rank, env.world_size, /*started_only=*/false, std::chrono::steady_clock::now() + within);
  } catch (const std::exception&) {
    // No rank 0 to tell (not started, or gone): its own wait names this rank. Rank 0
    // unable to host (its port taken): the others say they cannot reach it.
  }
}

void Rendezvous::EndRendezvous(const std::string& here, const std::string& for_the_others) {
  try {
    SetText(*store_, kEndedKey, for_the_others);
  } catch (const std::exception&) {
    // The store is gone with rank 0, which ended the rendezvous itself or will time out:
    // this rank's own error is the one that says what is wrong.
  }
  AfterTheEnd(*store_, rank_, world_size_, /*started_only=*/true, std::chrono::steady_clock::now() + kEndedLinger);
  throw std::runtime_error(here);
}

void Rendezvous::WaitForEveryRank(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto key = [](int rank) { return "poplar/joined/" + std::to_string(rank); };
  const std::string rank_text = std::to_string(rank_);
  // A RANK given to two processes: the second to count itself ends the rendezvous.
  if (store_->add(StartedKey(rank_), 1) > 1) {
    EndRendezvous("RANK " + rank_text + " is taken by another process: every rank of a job needs its own RANK",
                  "RANK " + rank_text + " was given to two processes: every rank of a job needs its own RANK");
  }
  const std::string own = std::to_string(world_size_);
  SetText(*store_, key(rank_), own);
  // A rank whose WORLD_SIZE differs would otherwise wait for ranks that do not exist, or
  // be waited for as one that never joined. Empty when `rank`'s is this rank's.
  auto world_size_difference = [&](int rank) -> std::string {
    const std::string theirs = GetText(*store_, key(rank));
    if (theirs == own) return "";
    return "WORLD_SIZE is " + own + " here but " + theirs + " on rank " + std::to_string(rank) +
           ": every rank of a job must be started with the same WORLD_SIZE";
  };
  if (!PollUntilSet({key(0)}, deadline)) throw Incomplete({0});
  if (rank_ != 0) {
    if (const std::string difference = world_size_difference(0); !difference.empty()) {
      EndRendezvous(difference, "rank " + rank_text + " was started with WORLD_SIZE " + own +
                                    ": every rank of a job must be started with the same WORLD_SIZE");
    }
  }
  std::vector<std::string> keys;
  for (int rank = 0; rank < world_size_; ++rank) keys.push_back(key(rank));
  if (!PollUntilSet(keys, deadline)) {
    std::vector<int> missing;
    for (int rank = 0; rank < world_size_; ++rank) {
      if (!store_->check({key(rank)})) {
        missing.push_back(rank);
      } else if (const std::string difference = world_size_difference(rank); !difference.empty()) {
        throw std::runtime_error(difference);
      }
    }
    throw Incomplete(missing);
  }
  if (rank_ != 0) {
    if (!PollUntilSet({kAgreedKey}, deadline)) throw Incomplete({});
    return;
  }
  for (int rank = 1; rank < world_size_; ++rank) {
    if (const std::string difference = world_size_difference(rank); !difference.empty()) {
      EndRendezvous(difference, "rank " + std::to_string(rank) + " was started with another WORLD_SIZE than rank 0's " +
                                    own + ": every rank of a job must be started with the same WORLD_SIZE");
    }
  }
  SetText(*store_, kAgreedKey, "1");
}

PeerFailure Rendezvous::Incomplete(const std::vector<int>& missing) const {
  const std::string who = Join(missing, ", ", [](int rank) { return std::to_string(rank); });
  return PeerFailure("the rendezvous at " + env_.master_addr + ":" + std::to_string(env_.master_port) +
                     " did not complete within --timeout: " +
                     (missing.empty() ? "not all " + std::to_string(world_size_) + " ranks (WORLD_SIZE) joined"
                                      : std::string(missing.size() == 1 ? "rank " : "ranks ") + who + " of " +
                                            std::to_string(world_size_) + " (WORLD_SIZE) never joined") +
                     "; is every rank started, with the same MASTER_ADDR and MASTER_PORT?");
}

namespace {

// Why `mine` and `theirs` (rank `other`'s) differ: for JSON objects, the first key whose
// values differ and both values; else this rank's value.
std::string Difference(const std::string& mine, const std::string& theirs, int other) {
  const auto shorten = [](const std::string& text) { return text.size() > 200 ? text.substr(0, 200) + "..." : text; };
  const auto a = nlohmann::json::parse(mine, nullptr, false);
  const auto b = nlohmann::json::parse(theirs, nullptr, false);
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const auto there = b.find(key);
      if (there != b.end() && *there == value) continue;
      return "'" + key + "' is " + shorten(value.dump()) + " here but " +
             (there == b.end() ? "(none)" : shorten(there->dump())) + " on rank " + std::to_string(other);
    }
  }
  return "this rank's: " + shorten(mine);
}

}  // namespace

void Rendezvous::RequireAgreement(const std::string& what, const std::string& value) {
  if (world_size_ == 1) return;
  const std::string prefix = "poplar/agree/" + what + "/";
  SetText(*store_, prefix + std::to_string(rank_), value);
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(prefix + std::to_string(r));
  if (!PollUntilSet(keys, std::chrono::steady_clock::now() + timeout_, /*in_rendezvous=*/false)) {
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r) {
      if (!store_->check({keys[r]})) missing.push_back(r);
    }
    const bool one = missing.size() == 1;
    throw PeerFailure(
        std::string(one ? "rank " : "ranks ") + Join(missing, ", ", [](int rank) { return std::to_string(rank); }) +
        " did not send " + (one ? "its " : "their ") + what + " within --timeout (" +
        (one ? "it stopped, or is stuck: its" : "they stopped, or are stuck: their") + " own output says why)");
  }
  std::optional<InputError> differs;
  for (int r = 0; r < world_size_ && !differs; ++r) {
    const std::string theirs = GetText(*store_, prefix + std::to_string(r));
    if (theirs != value) {
      differs =
          InputError("ranks " + std::to_string(rank_) + " and " + std::to_string(r), what,
                     "differ: every rank must run with the same " + what + " (" + Difference(value, theirs, r) + ")");
    }
  }
  if (!differs) return;
  // Where the values differ every rank finds it and ends; rank 0 serves the store, so
  // each waits (within --timeout) until every rank has read them, or a rank still
  // reading would lose the store and say only "Connection reset by peer".
  SetText(*store_, prefix + "read/" + std::to_string(rank_), "1");
  std::vector<std::string> read;
  for (int r = 0; r < world_size_; ++r) read.push_back(prefix + "read/" + std::to_string(r));
  PollUntilSet(read, std::chrono::steady_clock::now() + timeout_, /*in_rendezvous=*/false);
  throw *differs;
}

}  // namespace poplar
