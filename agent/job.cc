#include "agent/job.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace poplar {
namespace {

std::string DescribeExit(int rank, int wait_status, const std::string& last_line) {
  std::string text = "rank " + std::to_string(rank) + " " + DescribeWaitStatus(wait_status);
  if (!last_line.empty()) text += ": " + last_line;
  return text;
}

}  // namespace

Job::Job(std::string id, std::vector<RankProcess> ranks, std::chrono::milliseconds stop_grace)
    : id_(std::move(id)), stop_grace_(stop_grace) {
  for (auto& process : ranks) {
    ranks_.emplace_back();
    Rank& rank = ranks_.back();
    rank.process = std::move(process);
    // A resumed job's worker appends to its metrics file: the lines already there were
    // reported by the run that wrote them.
    if (rank.process.metrics_path.empty()) continue;
    std::error_code missing;
    const auto existing = std::filesystem::file_size(rank.process.metrics_path, missing);
    if (!missing) rank.metrics_offset = existing;
  }
}

Job::~Job() {
  Stop("the agent dropped the job");
  for (auto& reader : readers_) reader.join();
  if (tailer_.joinable()) tailer_.join();
  if (escalator_.joinable()) escalator_.join();
}

void Job::Start(Spawner& spawner) {
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    {
      // Stopped before its ranks started (the head stops a job one node refused): start
      // no more. The tailer then ends the job as failed, with the stop's reason.
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
    }
    Spawned spawned;
    try {
      spawned = spawner.Spawn(ranks_[i].process.spec);
    } catch (const std::exception& error) {
      Stop(std::string("rank ") + std::to_string(ranks_[i].process.rank) + " could not start: " + error.what());
      break;
    }
    std::string command = "pid " + std::to_string(spawned.pid) + ": " + ranks_[i].process.spec.program;
    for (const auto& arg : ranks_[i].process.spec.args) command += " " + arg;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ranks_[i].pid = spawned.pid;
      ranks_[i].alive = true;
      ++running_;
      Push({JobEvent::Kind::kStarted, ranks_[i].process.rank, command, 0});
      // A Stop that came while this rank was being started saw nothing to signal.
      if (stopping_) {
        kill(-spawned.pid, SIGTERM);
        if (!escalator_.joinable()) escalator_ = std::thread([this] { Escalate(); });
      }
    }
    readers_.emplace_back([this, i, fd = spawned.output_fd] { ReadOutput(i, fd); });
  }
  tailer_ = std::thread([this] { TailMetrics(); });
}

void Job::Announce(JobEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ended_) Push(std::move(event));
}

void Job::Push(JobEvent event) {
  events_.push_back(std::move(event));
  changed_.notify_all();
}

void Job::ReadOutput(std::size_t index, int fd) {
  Rank& rank = ranks_[index];
  std::ofstream log(rank.process.log_path, std::ios::app);
  std::string pending;
  char buffer[4096];
  auto emit = [&](const std::string& line) {
    log << line << "\n";
    log.flush();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!line.empty()) rank.last_line = line;
    Push({JobEvent::Kind::kOutput, rank.process.rank, line, 0});
  };
  for (;;) {
    const ssize_t got = read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(got));
    for (std::size_t end; (end = pending.find('\n')) != std::string::npos;) {
      emit(pending.substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty()) emit(pending);
  close(fd);

  // Wait for the exit without reaping, so that the pid cannot be reused while Stop()
  // may still signal it; then reap under the lock.
  siginfo_t info{};
  while (waitid(P_PID, rank.pid, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  std::lock_guard<std::mutex> lock(mutex_);
  int status = 0;
  waitpid(rank.pid, &status, 0);
  rank.alive = false;
  const int code = ExitCodeOf(status);
  std::string exit = DescribeExit(rank.process.rank, status, rank.last_line);
  // The agent's own SIGKILL is a consequence of the stop, not a cause (the head ranks
  // causes by these words: launcher/head/launch_monitor.cc).
  if (escalated_ && code == 128 + SIGKILL) exit += " (by its agent, the stop's grace over)";
  Push({JobEvent::Kind::kExited, rank.process.rank, exit, code});
  if (code != 0 && !stopping_) {
    stopping_ = true;
    stop_reason_ = exit;
    SignalAlive(SIGTERM);
    escalator_ = std::thread([this] { Escalate(); });
  }
  --running_;
  changed_.notify_all();
}

void Job::TailMetrics() {
  for (;;) {
    bool last_pass;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(100), [this] { return running_ == 0; });
      last_pass = running_ == 0;
    }
    for (auto& rank : ranks_) {
      if (rank.process.metrics_path.empty()) continue;
      std::ifstream in(rank.process.metrics_path, std::ios::binary);
      if (!in) continue;
      in.seekg(static_cast<std::streamoff>(rank.metrics_offset));
      std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const auto end = chunk.rfind('\n');
      if (end == std::string::npos) continue;
      rank.metrics_offset += end + 1;
      std::lock_guard<std::mutex> lock(mutex_);
      for (std::size_t start = 0; start <= end;) {
        const auto stop = chunk.find('\n', start);
        const std::string line = chunk.substr(start, stop - start);
        start = stop + 1;
        if (line.empty()) continue;
        if (&rank == &ranks_.front()) {
          const auto record = nlohmann::json::parse(line, nullptr, false);
          if (record.is_object() && record.contains("step") && record["step"].is_number_integer()) {
            last_step_ = record["step"].get<std::int64_t>();
          }
        }
        Push({JobEvent::Kind::kMetrics, rank.process.rank, line, 0});
      }
    }
    if (last_pass) break;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ended_ = true;
  if (stopping_) {  // a stop, or a rank that exited non-zero (which stops the others)
    Push({JobEvent::Kind::kFailed, -1, stop_reason_.empty() ? "a rank failed" : stop_reason_, 1});
  } else {
    Push({JobEvent::Kind::kFinished, -1, "every rank finished", 0});
  }
}

bool Job::Next(JobEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [this] { return !events_.empty() || final_taken_; })) return false;
  if (events_.empty()) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  if (event->kind == JobEvent::Kind::kFinished || event->kind == JobEvent::Kind::kFailed) final_taken_ = true;
  return true;
}

void Job::Stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || ended_) return;
  stopping_ = true;
  stop_reason_ = reason;
  if (running_ == 0) return;  // nothing started yet (or everything already exited)
  SignalAlive(SIGTERM);
  escalator_ = std::thread([this] { Escalate(); });
}

void Job::SignalAlive(int signal_number) {
  for (const auto& rank : ranks_) {
    if (rank.alive) kill(-rank.pid, signal_number);  // the rank's process group
  }
}

void Job::Escalate() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_for(lock, stop_grace_, [this] { return running_ == 0; })) {
    escalated_ = true;
    SignalAlive(SIGKILL);
  }
}

std::vector<std::string> Job::devices() const {
  std::vector<std::string> devices;
  for (const auto& rank : ranks_) devices.push_back(rank.process.device);
  return devices;
}

std::vector<int> Job::ranks() const {
  std::vector<int> ranks;
  for (const auto& rank : ranks_) ranks.push_back(rank.process.rank);
  return ranks;
}

std::int64_t Job::last_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_step_;
}

double Job::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

}  // namespace poplar
