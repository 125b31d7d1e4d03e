#include "launcher/worker/metrics_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

InputError Unwritable(const std::string& path, const std::string& reason) {
  return InputError("--metrics", "", path + ": cannot write: " + reason);
}

// Whether `fd` is the file this process's stdout or stderr writes to (by another name:
// a link to /dev/stdout, /proc/PID/fd/1, the file the agent sends output to), which a
// fresh run must not empty.
bool IsOwnOutput(int fd) {
  struct stat file {};
  if (::fstat(fd, &file) != 0) return false;
  for (const int output : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat other {};
    if (::fstat(output, &other) == 0 && other.st_dev == file.st_dev && other.st_ino == file.st_ino) return true;
  }
  return false;
}

}  // namespace

std::string MetricsWriter::PathFor(const std::string& pattern, int rank) {
  const std::string placeholder = "{rank}";
  if (pattern.empty() || (pattern.find(placeholder) == std::string::npos && rank != 0)) return "";
  std::string path = pattern;
  for (auto at = path.find(placeholder); at != std::string::npos; at = path.find(placeholder, at)) {
    path.replace(at, placeholder.size(), std::to_string(rank));
  }
  return path;
}

MetricsWriter::MetricsWriter(const std::string& pattern, int rank) : path_(PathFor(pattern, rank)) {
  if (path_.empty()) return;
  if (const int own = OwnDescriptorOf(path_); own >= 0) {
    const int mode = ::fcntl(own, F_GETFL);
    if (mode < 0) throw Unwritable(path_, "file descriptor " + std::to_string(own) + " is not open");
    if ((mode & O_ACCMODE) == O_RDONLY) {
      throw Unwritable(path_, "file descriptor " + std::to_string(own) + " is open for reading only");
    }
    fd_ = ::fcntl(own, F_DUPFD_CLOEXEC, 0);  // the same open file: its offset, its flags
    if (fd_ < 0) throw Unwritable(path_, std::strerror(errno));
    return;
  }
  struct stat status {};
  if (::stat(path_.c_str(), &status) == 0 && S_ISFIFO(status.st_mode)) {
    // Without O_NONBLOCK the open would wait for a reader forever; with it, no reader
    // is ENXIO. The descriptor then blocks as usual: a slow reader slows the writes.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0 && errno == ENXIO) throw Unwritable(path_, "no process reads this pipe (start its reader first)");
    if (fd_ < 0) throw Unwritable(path_, std::strerror(errno));
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    return;
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Unwritable(path_, std::strerror(errno));
  emptiable_ = ::fstat(fd_, &status) == 0 && S_ISREG(status.st_mode) && !IsOwnOutput(fd_);
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), emptiable_(other.emptiable_) {
  other.fd_ = -1;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::Start(bool append) {
  if (fd_ >= 0 && emptiable_ && !append && ::ftruncate(fd_, 0) != 0) throw Unwritable(path_, std::strerror(errno));
}

void MetricsWriter::Write(const nlohmann::json& line) {
  if (fd_ < 0) return;
  if (const std::string failure = WriteAll(fd_, line.dump() + "\n"); !failure.empty()) throw Unwritable(path_, failure);
}

}  // namespace poplar
