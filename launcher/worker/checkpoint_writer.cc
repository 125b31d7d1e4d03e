#include "launcher/worker/checkpoint_writer.h"

#include <exception>
#include <iostream>

#include "launcher/device/counting_allocator.h"
#include "launcher/worker/stop_signals.h"

namespace poplar {

CheckpointWriter::CheckpointWriter(std::string dir, ModelConfig config, TrainingRecipe training, std::int64_t keep,
                                   CheckpointLine line)
    : dir_(std::move(dir)),
      config_(config),
      training_(std::move(training)),
      keep_(keep),
      line_(std::move(line)),
      thread_([this] { WriteQueued(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;  // leaving on an error: what was gathered is still a good checkpoint
    // The error is printed once the writes end; the agent may stop this rank before
    // then (the others failed too), so say now why it waits.
    const std::optional<std::int64_t> pending = waiting_ ? std::optional<std::int64_t>(waiting_->step) : writing_;
    if (pending && std::uncaught_exceptions() > 0) {
      std::cerr << "poplar-worker[rank 0]: stopping on an error (below) once the checkpoint of step " << *pending
                << " is written" << std::endl;
    }
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::Start(Checkpoint checkpoint) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    waiting_ = std::move(checkpoint);
    UpdateInFlight();
  }
  changed_.notify_all();
}

std::optional<std::int64_t> CheckpointWriter::DropWaiting() {
  std::optional<Checkpoint> dropped;  // its gigabytes freed outside the lock
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A stop came: the waiting checkpoint may be the last this rank makes (the gather of
    // the next can fail, peers gone), so it stays to be written.
    if (StopRequested() != 0) return std::nullopt;
    dropped.swap(waiting_);
    UpdateInFlight();
  }
  return dropped ? std::optional<std::int64_t>(dropped->step) : std::nullopt;
}

void CheckpointWriter::Check() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void CheckpointWriter::Finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  Check();
}

void CheckpointWriter::WriteQueued() {
  const CountingAllocator::HostMemory host;  // what writing allocates is the host's, not a device's
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return waiting_.has_value() || closing_; });
    if (!waiting_) return;  // closing, nothing left
    Checkpoint checkpoint = std::move(*waiting_);
    waiting_.reset();
    writing_ = checkpoint.step;
    lock.unlock();
    std::exception_ptr error;
    try {
      WriteCheckpoint(dir_, checkpoint, config_, training_, line_);
      PruneCheckpoints(dir_, keep_, line_);
    } catch (...) {
      error = std::current_exception();
    }
    checkpoint = Checkpoint{};  // its gigabytes freed before the lock is taken again
    lock.lock();
    writing_.reset();
    if (error) {
      error_ = error;
      waiting_.reset();
      if (StopRequested() != 0) SayError(error);  // UpdateInFlight ends the process
      UpdateInFlight();
      return;
    }
    UpdateInFlight();
  }
}

void CheckpointWriter::UpdateInFlight() { SetCheckpointInFlight(waiting_.has_value() || writing_.has_value()); }

void CheckpointWriter::SayError(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& failure) {
    std::cerr << "poplar-worker[rank 0]: error: " << failure.what() << std::endl;
  } catch (...) {
    std::cerr << "poplar-worker[rank 0]: error: the checkpoint could not be written" << std::endl;
  }
}

}  // namespace poplar
