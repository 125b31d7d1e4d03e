// Job: supervises one node's ranks of a training job (docs/operations.md, failures).
//
// Start() spawns every rank; from then on the Job turns what happens into a stream of
// events: each output line, each metrics record (tailed from the rank's metrics file),
// each exit, and one final event. When a rank fails, or Stop() is called, every other
// rank gets SIGTERM and, after a grace period, SIGKILL; the final event comes only once
// all of them have been reaped, so a failed job leaves no process behind. Every line a
// rank writes also goes to its log file.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "planner/base/spawner.h"
#include "planner/formats/stop_grace.h"

namespace poplar {

struct JobEvent {
  enum class Kind { kStarted, kOutput, kMetrics, kExited, kFinished, kFailed, kPlanSwitch };
  Kind kind = Kind::kOutput;
  int rank = -1;      // -1 for kFinished and kFailed
  std::string text;   // kStarted: "pid N: <command line>"; kPlanSwitch: the plan and why (agent.proto)
  int exit_code = 0;  // kExited: status, 128 + N when killed by signal N
};

struct RankProcess {
  int rank = 0;
  SpawnSpec spec;
  std::string metrics_path;  // the worker's --metrics file, tailed for kMetrics from its size at the start; empty: none
  std::string log_path;      // every output line is appended here
  std::string device;        // the device it runs on (DeviceKey), for the agent's bookkeeping
};

class Job {
 public:
  // `stop_grace`: how long a stopped rank may take before SIGKILL (planner/formats/stop_grace.h;
  // the job's stop_grace_s). A rank ends at once on SIGTERM unless rank 0 is writing a
  // checkpoint, which it finishes first (launcher/worker/stop_signals.h): a large model's
  // takes a while to flush to the disk.
  Job(std::string id, std::vector<RankProcess> ranks,
      std::chrono::milliseconds stop_grace = std::chrono::seconds(kDefaultStopGraceSeconds));
  ~Job();  // stops the ranks if still running and waits for them
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Spawns every rank. If one cannot start, the others are stopped and the job fails
  // (its final event says which rank and why).
  void Start(Spawner& spawner);

  // Waits up to `timeout` for the next event. Returns false on timeout and after the
  // final event (kFinished or kFailed) has been handed out.
  bool Next(JobEvent* event, std::chrono::milliseconds timeout);

  // Adds an event of the agent's own (kPlanSwitch) to the stream, among the ranks'.
  void Announce(JobEvent event);

  // Stops every rank (first reason wins; it becomes the kFailed text). Returns at once.
  void Stop(const std::string& reason);

  const std::string& id() const { return id_; }
  std::vector<int> ranks() const;
  std::vector<std::string> devices() const;  // each rank's RankProcess::device
  std::chrono::milliseconds stop_grace() const { return stop_grace_; }
  std::int64_t last_step() const;
  double seconds() const;

 private:
  struct Rank {
    RankProcess process;
    pid_t pid = -1;
    bool alive = false;
    std::string last_line;
    std::size_t metrics_offset = 0;
  };
  void ReadOutput(std::size_t index, int fd);
  void TailMetrics();
  void Push(JobEvent event);
  void SignalAlive(int signal_number);
  void Escalate();

  const std::string id_;
  const std::chrono::milliseconds stop_grace_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Rank> ranks_;
  std::deque<JobEvent> events_;
  std::string stop_reason_;
  bool stopping_ = false;
  bool escalated_ = false;  // the stop's grace ran out: the ranks left got SIGKILL
  int running_ = 0;
  bool ended_ = false;        // final event queued
  bool final_taken_ = false;  // final event handed out
  std::int64_t last_step_ = 0;
  std::vector<std::thread> readers_;
  std::thread tailer_;
  std::thread escalator_;
};

}  // namespace poplar
