#include "planner/base/spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <stdexcept>

extern char** environ;

namespace poplar {
namespace {

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// Runs in the spawner thread. Between fork and exec the child calls only
// async-signal-safe functions.
Spawned ForkExec(const SpawnSpec& spec) {
  std::vector<std::string> argv_strings{spec.program};
  argv_strings.insert(argv_strings.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(spec.env);
  int output[2], report[2];
  if (pipe2(output, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(report, O_CLOEXEC) != 0) {
    close(output[0]);
    close(output[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The agent blocks SIGTERM and SIGINT in every thread (a thread sigwaits for them);
    // a worker that inherited the mask would never see the SIGTERM that stops it.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl took effect
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(output[1], 1) < 0 || dup2(output[1], 2) < 0 ||
        (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0)) {
      int error = errno;
      (void)!write(report[1], &error, sizeof(error));
      _exit(127);
    }
    execve(argv[0], argv.data(), envp.data());
    int error = errno;
    (void)!write(report[1], &error, sizeof(error));
    _exit(127);
  }
  const int fork_errno = errno;
  close(output[1]);
  close(report[1]);
  if (pid < 0) {
    close(output[0]);
    close(report[0]);
    throw std::runtime_error("cannot start " + spec.program + ": " + std::strerror(fork_errno));
  }
  int child_errno = 0;
  ssize_t got;
  do {
    got = read(report[0], &child_errno, sizeof(child_errno));
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got == sizeof(child_errno)) {  // exec never happened
    close(output[0]);
    waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot start " + spec.program + ": " + std::strerror(child_errno));
  }
  return {pid, output[0]};
}

}  // namespace

Spawner::Spawner() : thread_([this] { Loop(); }) {}

Spawner::~Spawner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Spawner::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

Spawned Spawner::Spawn(const SpawnSpec& spec) {
  std::packaged_task<Spawned()> task([&spec] { return ForkExec(spec); });
  std::future<Spawned> result = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw std::runtime_error("the agent is shutting down");
    tasks_.push_back([&task] { task(); });
  }
  wake_.notify_all();
  return result.get();
}

std::vector<std::string> InheritedEnvironment() {
  static const char* const kNames[] = {"PATH", "LD_LIBRARY_PATH", "HOME", "LANG", "TMPDIR"};
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string variable = *entry;
    const std::string name = variable.substr(0, variable.find('='));
    // OpenBLAS's kernel settings (OPENBLAS_CORETYPE) change the arithmetic; its thread
    // count is the device's (OMP_NUM_THREADS, set per worker), never inherited.
    const bool blas = name.rfind("OPENBLAS_", 0) == 0 && name != "OPENBLAS_NUM_THREADS";
    bool keep = name.rfind("NCCL_", 0) == 0 || name.rfind("GLOO_", 0) == 0 || blas;
    for (const char* wanted : kNames) keep = keep || name == wanted;
    if (keep) env.push_back(variable);
  }
  return env;
}

std::vector<std::string> WholeEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) env.emplace_back(*entry);
  return env;
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int signal = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  }
  return "stopped with wait status " + std::to_string(wait_status);
}

}  // namespace poplar
