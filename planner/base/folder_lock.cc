#include "planner/base/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace poplar {

FolderLock::FolderLock(const std::string& folder, const std::string& name)
    : path_((std::filesystem::path(folder) / name).string()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path_ + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    // The holder's pid, for the next one's message (the lock holds without it).
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
    return;
  }
  if (errno == EWOULDBLOCK) {
    outcome_ = Outcome::kHeldByAnother;
    char text[32] = {};
    const ssize_t read = ::pread(fd_, text, sizeof(text) - 1, 0);
    if (read > 0) holder_ = std::string(text, static_cast<std::size_t>(read)).substr(0, std::strcspn(text, "\n"));
  } else {
    outcome_ = Outcome::kUnsupported;
    reason_ = std::strerror(errno);
  }
  ::close(fd_);
  fd_ = -1;
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

FolderLock::FolderLock(FolderLock&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      outcome_(other.outcome_),
      holder_(std::move(other.holder_)),
      reason_(std::move(other.reason_)) {}

}  // namespace poplar
