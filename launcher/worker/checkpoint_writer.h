// Rank 0's checkpoints, written in the background while training goes on.
//
// A checkpoint's tensors are gathered in the training loop (collectives: every rank
// takes part), as CPU copies that nothing else touches (host memory, which an emulated
// device does not count: CountingAllocator::HostMemory); writing them to the disk is
// rank 0's alone and runs on a thread of its own. So a slow disk costs no step time,
// and no rank waits in a collective while rank 0 writes: a large model's checkpoint,
// flushed to the disk, can take longer than --timeout, and the other ranks would give up
// on rank 0 as stuck at the barrier after it.
//
// At most one checkpoint waits while another is written: when the disk is slower than
// --checkpoint-every, a newer checkpoint replaces the waiting one (the newest is the
// one a resume wants); dropped before the newer one is gathered (DropWaiting), so
// memory holds at most two. A write that failed is reported
// (rethrown) by the next Start, Check or Finish, so the job ends with the writer's own
// error. The destructor, as Finish, writes what waits (a job ending on another rank's
// error keeps its last gathered checkpoint), without throwing; every write is atomic,
// so `latest` names a complete checkpoint whatever happens. A stop signal (SIGTERM,
// SIGINT) that comes while a checkpoint is in flight waits for it (stop_signals.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "launcher/worker/checkpoint.h"
#include "planner/formats/model_config.h"

namespace poplar {

class CheckpointWriter {
 public:
  // Keeps the `keep` newest checkpoints in `dir` of the run's `line` of training
  // (PruneCheckpoints; 0: every one). Each meta.json records `config`, `training` and
  // `line`.
  CheckpointWriter(std::string dir, ModelConfig config, TrainingRecipe training, std::int64_t keep,
                   CheckpointLine line);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues `checkpoint` to be written (WriteCheckpoint) and returns at once; one still
  // waiting (DropWaiting was not called) gives way to it. Throws a failed write's error.
  void Start(Checkpoint checkpoint);
  // Drops the checkpoint waiting to be written, if any, and returns its step: called
  // before the next one is gathered, which would replace it, so that memory never holds
  // three (the one being written, the waiting one, the new one). After a stop signal it
  // drops nothing (stop_signals.h).
  std::optional<std::int64_t> DropWaiting();
  // Throws the error of a write that has failed; returns at once otherwise.
  void Check();
  // Writes what is queued and waits for it; throws a failed write's error.
  void Finish();

 private:
  void WriteQueued();  // the writing thread
  // Tells stop_signals.h whether a checkpoint is in flight (waiting or being written):
  // a stop then waits for it. Called with mutex_ held, after every change of either.
  void UpdateInFlight();
  // Prints a failed write's error, which no one will rethrow once a stop ends the process.
  static void SayError(const std::exception_ptr& error);

  const std::string dir_;
  const ModelConfig config_;
  const TrainingRecipe training_;
  const std::int64_t keep_;
  const CheckpointLine line_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Checkpoint> waiting_;    // guarded by mutex_, as are the three below
  std::optional<std::int64_t> writing_;  // the step being written
  bool closing_ = false;                 // no more checkpoints: write what waits, then end
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace poplar
