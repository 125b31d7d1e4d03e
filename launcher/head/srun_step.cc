#include "launcher/head/srun_step.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "planner/base/number_list.h"
#include "planner/base/spawner.h"

namespace poplar {
namespace {

using Clock = std::chrono::steady_clock;

// A step not ended this long after its stop grace is aborted; srun, this long after.
constexpr auto kStopMargin = std::chrono::seconds(15);
constexpr auto kAbortMargin = std::chrono::seconds(10);

// "0: text" (srun --label, padded to the widest task id): the task id, and the text
// after the label; -1 for a line of srun's own.
int LabelOf(const std::string& line, std::string* text) {
  std::size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  const std::size_t digits = i;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && i - digits < 9) ++i;
  if (i == digits || line.compare(i, 2, ": ") != 0) return -1;
  *text = line.substr(i + 2);
  return std::stoi(line.substr(digits, i - digits));
}

// Each rank's metrics file, read on from where the last read ended, whole lines only.
class MetricsTail {
 public:
  explicit MetricsTail(const std::vector<std::string>& files) : files_(files), offsets_(files.size(), 0) {}

  template <typename Each>
  void Read(Each&& each) {
    for (std::size_t rank = 0; rank < files_.size(); ++rank) {
      std::ifstream in(files_[rank], std::ios::binary);
      if (!in) continue;
      in.seekg(static_cast<std::streamoff>(offsets_[rank]));
      std::string line;
      while (std::getline(in, line) && !in.eof()) {  // a last line without its newline is still being written
        offsets_[rank] += line.size() + 1;
        if (!line.empty()) each(static_cast<int>(rank), line);
      }
    }
  }

 private:
  std::vector<std::string> files_;
  std::vector<std::size_t> offsets_;
};

}  // namespace

std::optional<TaskFailure> ParseTaskFailure(const std::string& line) {
  const std::string prefix = "srun: error: ";
  if (line.rfind(prefix, 0) != 0) return std::nullopt;
  std::size_t at = line.find(": task", prefix.size());
  if (at == std::string::npos) return std::nullopt;
  at += 6;
  if (line.compare(at, 2, "s ") == 0) {
    at += 2;
  } else if (line.compare(at, 1, " ") == 0) {
    at += 1;
  } else {
    return std::nullopt;
  }
  const std::size_t colon = line.find(": ", at);
  if (colon == std::string::npos) return std::nullopt;
  const auto ranks = ParseNumberList(line.substr(at, colon - at));
  if (!ranks) return std::nullopt;
  TaskFailure failure;
  failure.ranks = *ranks;
  const std::string what = line.substr(colon + 2);
  const std::string exited = "Exited with exit code ";
  if (what.rfind(exited, 0) == 0) {
    const std::string code = what.substr(exited.size());
    if (code.empty() || code.size() > 3 || code.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    failure.exit_code = std::stoi(code);
    failure.what = "exited with status " + code;
    return failure;
  }
  for (int signal = 1; signal < NSIG; ++signal) {
    const char* name = strsignal(signal);
    if (name != nullptr && what == name) {
      failure.exit_code = 128 + signal;
      failure.what = "was killed by signal " + std::to_string(signal) + " (" + what + ")";
      return failure;
    }
  }
  failure.what = "ended: " + what;
  return failure;
}

SrunOutcome RunSrunStep(const SrunStep& step, LaunchMonitor& monitor, const Interruption& interruption,
                        std::ostream& out, const std::function<void(int rank, const std::string& line)>& on_metrics) {
  SrunOutcome outcome;
  const int world = static_cast<int>(step.nodes.size());
  Spawner spawner;
  Spawned child;
  try {
    child = spawner.Spawn({step.srun, step.args, step.env, step.cwd});
  } catch (const std::runtime_error& error) {
    monitor.Failure("head", error.what());
    return outcome;
  }
  outcome.started = true;
  std::vector<std::string> last_line(world);
  std::string srun_said;  // srun's own last line
  const auto handle = [&](const std::string& line) {
    std::string text;
    const int rank = LabelOf(line, &text);
    if (rank >= 0 && rank < world) {
      monitor.Output(rank, text);
      if (!text.empty()) last_line[rank] = text;
      return;
    }
    if (const std::optional<TaskFailure> failure = ParseTaskFailure(line)) {
      for (int failed : failure->ranks) {
        if (failed >= world) continue;
        const std::string what = "rank " + std::to_string(failed) + " " + failure->what;
        monitor.Output(failed, "[poplar] " + what);
        monitor.Failure(step.nodes[failed], what + (last_line[failed].empty() ? "" : ": " + last_line[failed]),
                        failure->exit_code);
      }
      return;
    }
    out << line << std::endl;
    srun_said = line;
  };
  MetricsTail metrics(step.metrics_files);
  const auto read_metrics = [&] {
    metrics.Read([&](int rank, const std::string& line) {
      monitor.Metrics(rank, line);
      if (on_metrics) on_metrics(rank, line);
    });
  };

  std::string pending;
  bool output_open = true, exited = false, aborted = false;
  int status = 0;
  std::optional<Clock::time_point> stopped_at, aborted_at;
  while (output_open || !exited) {
    if (output_open) {
      pollfd readable{child.output_fd, POLLIN, 0};
      if (::poll(&readable, 1, 100) > 0) {
        char buffer[65536];
        const ssize_t got = ::read(child.output_fd, buffer, sizeof buffer);
        if (got > 0) {
          pending.append(buffer, static_cast<std::size_t>(got));
          for (std::size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
            handle(pending.substr(0, end));
          }
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          output_open = false;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    read_metrics();
    if (!exited && ::waitpid(child.pid, &status, WNOHANG) == child.pid) exited = true;
    if (exited) continue;
    const Clock::time_point now = Clock::now();
    if (!stopped_at && interruption.signal() != 0) {
      outcome.signal = interruption.signal();
      monitor.UserStopped(InterruptionName(outcome.signal));
      out << "stopping the job step (" << InterruptionName(outcome.signal) << "): srun passes SIGTERM on to every rank"
          << std::endl;
      ::kill(child.pid, SIGTERM);
      stopped_at = now;
    }
    if (stopped_at && !aborted && now > *stopped_at + step.stop_grace + kStopMargin) {
      out << "the job step has not ended " << (step.stop_grace + kStopMargin).count()
          << " s after its stop: aborting it" << std::endl;
      ::kill(child.pid, SIGINT);  // srun: two within a second terminate the step
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::kill(child.pid, SIGINT);
      aborted = true;
      aborted_at = now;
    }
    if (aborted && now > *aborted_at + kAbortMargin) ::kill(child.pid, SIGKILL);
  }
  if (!pending.empty()) handle(pending);
  ::close(child.output_fd);
  read_metrics();
  outcome.exit_code = ExitCodeOf(status);
  if (outcome.exit_code != 0 && !monitor.failed()) {
    monitor.Failure("head", "srun " + DescribeWaitStatus(status) + (srun_said.empty() ? "" : ": " + srun_said),
                    outcome.exit_code);
  }
  return outcome;
}

}  // namespace poplar
