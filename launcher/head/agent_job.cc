#include "launcher/head/agent_job.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <random>

#include "agent/rpc/keepalive.h"
#include "launcher/head/head_commands.h"
#include "launcher/head/interruption.h"
#include "launcher/head/node_calls.h"
#include "planner/base/run_app.h"
#include "planner/formats/job_settings.h"
#include "planner/formats/stop_grace.h"

namespace poplar {
namespace {

// One event from one node's stream, or the end of that stream.
struct NodeEvent {
  std::size_t node = 0;
  bool stream_ended = false;
  std::string stream_error;  // set when the stream broke
  v1::LaunchEvent event;
  bool lost_agent = false;  // the stream broke mid-job because its agent went away
};

class EventQueue {
 public:
  void Push(NodeEvent event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
    ready_.notify_one();
  }
  bool Pop(NodeEvent* event, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return false;
    *event = std::move(events_.front());
    events_.pop_front();
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<NodeEvent> events_;
};

// Time that goes on while the machine is suspended (CLOCK_BOOTTIME): steady_clock's
// CLOCK_MONOTONIC stops then, and a suspended head would show no stall.
struct AwakeClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<AwakeClock>;
  static constexpr bool is_steady = true;
  static time_point now() {
    timespec now{};
    clock_gettime(CLOCK_BOOTTIME, &now);
    return time_point(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec));
  }
};

// 16 hex digits, new for every launch.
std::string LaunchId() {
  std::random_device random;
  std::uniform_int_distribution<unsigned long long> digits;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", digits(random));
  return text;
}

// A stall shorter than the keepalive's timeout cannot have dropped a connection; a
// failure that comes later than kStallEffect after one has another cause.
constexpr auto kStall = kKeepaliveTimeout;
constexpr auto kStallEffect = std::chrono::seconds(30);

// The head's own stalls, seen from its event loop, which turns at least every 200 ms: a
// longer gap means the head was not running (suspended, its machine paused).
class StallWatch {
 public:
  // Once per turn of the loop, after its wait, so that the event that ends a stall sees it.
  void Turn() {
    const auto turn = AwakeClock::now();
    if (turn - last_turn_ > kStall) {
      stall_s_ = std::chrono::duration<double>(turn - last_turn_).count();
      stall_end_ = turn;
    }
    last_turn_ = turn;
  }
  // The latest stall's seconds if it ended within kStallEffect, else 0.
  double Recent() const { return stall_s_ > 0 && AwakeClock::now() - stall_end_ < kStallEffect ? stall_s_ : 0; }

 private:
  AwakeClock::time_point last_turn_ = AwakeClock::now();
  double stall_s_ = 0;  // the latest stall, 0 while none
  AwakeClock::time_point stall_end_;
};

// Stops the job on every node of the launch, once; then, after the stop's wait, ends the
// streams still open (the agents stop the job when their stream breaks).
class JobStop {
 public:
  JobStop(ClusterAgents& agents, const std::string& job_id, const std::string& launch_id,
          const std::vector<std::pair<std::size_t, v1::LaunchRequest>>& requests, CallCanceller& streams)
      : agents_(agents), job_id_(job_id), launch_id_(launch_id), requests_(requests), streams_(streams) {
    // 15 s longer than the job's stop grace (in it a rank 0 may be finishing a
    // checkpoint; agent/job.h), and 30 s at least.
    int stop_grace_s = kDefaultStopGraceSeconds;
    for (const auto& [node, request] : requests) {
      const std::map<std::string, std::string> texts(request.settings().begin(), request.settings().end());
      stop_grace_s = std::max(stop_grace_s, StopGraceSeconds(ParseJobSettings(texts, "settings")));
    }
    wait_ = std::chrono::seconds(stop_grace_s + 15);
  }

  bool stopping() const { return stopping_; }
  void Everywhere(const std::string& reason) {
    if (stopping_) return;
    stopping_ = true;
    for (const auto& request : requests_) {
      try {
        agents_.clients[request.first]->Stop(job_id_, reason, launch_id_);
      } catch (const AgentError&) {
        // That node's stream reports its own failure; its agent stops the job when the
        // stream breaks.
      }
    }
    deadline_ = std::chrono::steady_clock::now() + wait_;
  }
  // Once per turn: the streams end when the stop's wait is over.
  void CancelStreamsWhenDue() {
    if (std::chrono::steady_clock::now() <= deadline_) return;
    streams_.Cancel();
    deadline_ = std::chrono::steady_clock::time_point::max();
  }

 private:
  ClusterAgents& agents_;
  const std::string& job_id_;
  const std::string& launch_id_;
  const std::vector<std::pair<std::size_t, v1::LaunchRequest>>& requests_;
  CallCanceller& streams_;
  std::chrono::seconds wait_{0};
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
};

// What one event of node `node_name`'s stream tells the monitor.
void Dispatch(const v1::LaunchEvent& event, const std::string& node_name, LaunchMonitor& monitor,
              AgentJobOutcome& outcome, const std::function<void(int, const std::string&)>& on_metrics) {
  switch (event.kind()) {
    case v1::LaunchEvent::STARTED:
      outcome.any_started = true;
      monitor.Output(event.rank(), "[poplar] started on node " + node_name + ": " + event.text());
      break;
    case v1::LaunchEvent::OUTPUT:
      monitor.Output(event.rank(), event.text());
      break;
    case v1::LaunchEvent::METRICS:
      monitor.Metrics(event.rank(), event.text());
      if (on_metrics) on_metrics(event.rank(), event.text());
      break;
    case v1::LaunchEvent::EXITED:
      monitor.Output(event.rank(), "[poplar] " + event.text());
      // Every rank that failed is a candidate cause, not only the first one its agent
      // saw: on one node, rank 0 failing to host the rendezvous may exit after rank 1,
      // which lost it.
      if (event.exit_code() != 0) monitor.Failure(node_name, event.text(), event.exit_code());
      break;
    case v1::LaunchEvent::JOB_FAILED:
      monitor.Failure(node_name, event.text());
      break;
    case v1::LaunchEvent::PLAN_SWITCH:
      monitor.PlanSwitch(event.text());
      break;
    default:
      break;
  }
}

}  // namespace

std::string DefaultJobId(const std::string& cluster_name, const std::string& what) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  // A long name is shortened, never the stamp, so that two runs do not share an id.
  const std::string suffix = "-" + (what.empty() ? "" : what + "-") + stamp;
  std::string id = cluster_name.substr(0, 64 - std::min<std::size_t>(suffix.size(), 63)) + suffix;
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  }
  return id.substr(0, 64);
}

void AddRendezvousOptions(CLI::App* command, int& master_port, int& timeout_s) {
  command
      ->add_option("--master-port", master_port, "Rendezvous port on rank 0's host (default: one its agent finds free)")
      ->check(WholeNumberIn(1, 65535));
  command
      ->add_option("--timeout", timeout_s, "Seconds before the rendezvous or a collective gives up (0: worker default)")
      ->check(WholeNumberIn(0, 86400));
}

void CheckAgentJob(const ClusterSpec& cluster, ClusterAgents& agents, const std::string& job_id,
                   const std::vector<std::pair<std::size_t, v1::LaunchRequest>>& requests) {
  // Every node at once; each answers in about the time of listing its devices.
  std::vector<std::string> refusals(requests.size());
  NodeCalls(requests.size(), [&](std::size_t i) {
    try {
      agents.clients[requests[i].first]->CheckLaunch(requests[i].second);
    } catch (const AgentError& error) {
      refusals[i] = error.what();
    } catch (const std::exception& error) {
      refusals[i] = "node '" + cluster.nodes[requests[i].first].name + "': " + error.what();
    }
  }).Join();
  std::string reasons;
  for (const std::string& refusal : refusals) {
    if (!refusal.empty()) reasons += (reasons.empty() ? "" : "; ") + refusal;
  }
  if (!reasons.empty()) {
    throw CommandFailed("job " + job_id + " was not started: " + reasons + "; no worker was started on any node");
  }
}

AgentJobOutcome RunAgentJob(const ClusterSpec& cluster, ClusterAgents& agents, const std::string& job_id,
                            const std::vector<std::pair<std::size_t, v1::LaunchRequest>>& requests,
                            LaunchMonitor& monitor, std::ostream& out,
                            const std::function<void(int rank, const std::string& line)>& on_metrics) {
  EventQueue queue;
  CallCanceller streams_canceller;  // ends every Launch stream at once (agents then stop the job)
  // Names this launch on every agent, so that stopping it cannot stop another launch's
  // job of the same id (which the agents refused this one for).
  const std::string launch_id = LaunchId();
  NodeCalls streams(
      requests.size(),
      [&](std::size_t i) {
        const std::size_t node = requests[i].first;
        v1::LaunchRequest request = requests[i].second;
        request.set_launch_id(launch_id);
        NodeEvent end{node, true, "", {}};
        try {
          agents.clients[node]->Launch(
              request,
              [&](const v1::LaunchEvent& event) {
                queue.Push({node, false, "", event});
              },
              &streams_canceller);
        } catch (const AgentError& error) {
          end.stream_error = error.reason();
          end.lost_agent = error.kind() == AgentError::Kind::kLostAgent;
        }
        queue.Push(end);
      },
      [&] { streams_canceller.Cancel(); });

  // Ctrl-C, SIGTERM (a scheduler, `timeout`) and SIGHUP (the terminal closed) stop the
  // job everywhere in order. (SIGPIPE is ignored from main: lost output ends nothing.)
  const Interruption interruption;
  AgentJobOutcome outcome;
  JobStop stop(agents, job_id, launch_id, requests, streams_canceller);
  StallWatch stalls;
  // Whatever happens in the loop (a monitor that cannot write, a callback that throws),
  // the job is stopped everywhere and the stream threads are joined before leaving.
  try {
    for (std::size_t open_streams = requests.size(); open_streams > 0;) {
      if (interruption.signal() != 0 && !stop.stopping()) {
        const std::string how = InterruptionName(interruption.signal());
        out << "stopping job " << job_id << " everywhere (" << how << ")" << std::endl;
        monitor.UserStopped(how);
        stop.Everywhere("stopped by the user (" + how + " on the head node)");
      }
      stop.CancelStreamsWhenDue();
      NodeEvent item;
      const bool popped = queue.Pop(&item, std::chrono::milliseconds(200));
      stalls.Turn();
      if (!popped) continue;
      const std::string& node_name = cluster.nodes[item.node].name;
      if (!item.stream_ended) {
        Dispatch(item.event, node_name, monitor, outcome, on_metrics);
      } else {
        --open_streams;
        // A lost agent is a cause whenever it is noticed (its peers' resets may have
        // started the stop first); any other broken or cancelled stream is a stop.
        if (!item.stream_error.empty() && item.lost_agent) {
          monitor.AgentLost(node_name, item.stream_error);
        } else if (!item.stream_error.empty()) {
          monitor.Stopped(node_name, item.stream_error);
        }
      }
      if (monitor.failed() && !stop.stopping()) {
        // The first failure, and not the user's stop: a stall just before is its cause.
        if (const double stall_s = stalls.Recent(); stall_s > 0) monitor.HeadStalled(stall_s);
        stop.Everywhere("the job failed elsewhere: " + monitor.RootCause());
      }
    }
  } catch (...) {
    stop.Everywhere("the head node failed");
    streams.Cancel();
    streams.Join();
    throw;
  }
  streams.Join();
  outcome.signal = interruption.signal();
  return outcome;
}

}  // namespace poplar
