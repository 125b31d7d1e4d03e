#include "agent/work_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "planner/input_error.h"

namespace poplar {

namespace fs = std::filesystem;

std::string ResolveInside(const std::string& work_dir, const std::string& relative,
                          const std::string& field) {
  if (relative.empty()) throw InputError(field, "", "is empty");
  if (fs::path(relative).is_absolute()) {
    throw InputError(field, "", "'" + relative + "' must be relative to the agent's work directory");
  }
  std::error_code error;
  const fs::path root = fs::canonical(work_dir, error);
  const fs::path resolved = fs::weakly_canonical(root / relative, error).lexically_normal();
  if (error) throw InputError(field, "", "'" + relative + "': " + error.message());
  const auto mismatch = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (mismatch.first != root.end() || resolved == root || resolved == root / "") {
    throw InputError(field, "", "'" + relative + "' leads outside the agent's work directory");
  }
  return resolved.string();
}

void CheckJobId(const std::string& job_id) {
  const bool plain = !job_id.empty() && job_id.size() <= 64 && job_id != "." && job_id != ".." &&
                     job_id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789._-") == std::string::npos;
  if (!plain) {
    throw InputError("job_id", "", "'" + job_id + "' must be 1-64 characters of letters, digits, '.', '_' or '-'");
  }
}

WorkDirLock::WorkDirLock(const std::string& work_dir, const std::string& config_file) {
  const std::string path = (fs::path(work_dir) / ".agent.lock").string();
  // Close-on-exec: a worker that inherited it would hold the lock after the agent died.
  // No following a link: the lock file is the agent's own, never somewhere else.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw InputError(config_file, "work_dir", "cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {  // not held by another: locks do not work here (NFS without them)
      const std::string reason = std::strerror(errno);
      ::close(fd_);
      fd_ = -1;
      throw InputError(config_file, "work_dir", "cannot lock " + path + ": " + reason +
                                                    "; the work_dir must be on a file system with locks (a local disk)");
    }
    char holder[32] = {};
    const ssize_t read = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    const std::string pid = read > 0 ? std::string(holder, static_cast<std::size_t>(read)) : "";
    throw InputError(config_file, "work_dir",
                     work_dir + " is in use by another poplar-agent" +
                         (pid.empty() ? std::string() : " (pid " + pid.substr(0, pid.find('\n')) + ")") +
                         "; each agent needs a work_dir of its own");
  }
  // The holder's pid, for a second agent's message (the lock holds without it).
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

WorkDirLock::~WorkDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace poplar
