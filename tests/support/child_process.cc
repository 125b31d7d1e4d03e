#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace poplar::testing {

ChildProcess::ChildProcess(const ChildOptions& options) {
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    for (const auto& [name, value] : options.env) ::setenv(name.c_str(), value.c_str(), 1);
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0 || ::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0 ||
        (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0)) {
      ::_exit(126);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (!finished_) {
    Signal(SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

void ChildProcess::Signal(int signal_number) {
  if (!finished_) ::kill(pid_, signal_number);
}

int ChildProcess::Wait(std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!finished_) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      finished_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      finished_ = true;
      status_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

ProcessOutcome RunProcess(ChildOptions options, const std::string& io_folder, std::chrono::milliseconds deadline) {
  options.stdout_path = io_folder + "/stdout";
  options.stderr_path = io_folder + "/stderr";
  ChildProcess child(options);
  ProcessOutcome outcome;
  outcome.exit_code = child.Wait(deadline);
  outcome.out = ReadWholeFile(options.stdout_path);
  outcome.err = ReadWholeFile(options.stderr_path);
  return outcome;
}

}  // namespace poplar::testing
