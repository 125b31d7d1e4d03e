// An exclusive lock (flock) on a file of a folder, held for the owner's life and released
// by the kernel however the process ends (a crash or SIGKILL leaves no stale lock). It
// keeps two processes from writing one folder as if each had it alone: two agents on one
// work_dir, two runs on one --checkpoint-dir.
#pragma once

#include <string>

namespace poplar {

class FolderLock {
 public:
  enum class Outcome {
    kLocked,         // this process holds it
    kHeldByAnother,  // holder() says which process, when it wrote its pid
    kUnsupported,    // the file system has no locks (NFS without lockd): reason()
  };
  // Opens (creating) <folder>/<name> close-on-exec, so that a child never holds the lock
  // after its parent is gone, and never through a symbolic link, then tries to lock it
  // without waiting; when locked, writes this process's pid into it for the message of
  // the next one. Throws std::runtime_error ("cannot open PATH: reason") when the file
  // cannot be opened.
  FolderLock(const std::string& folder, const std::string& name);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&&) = delete;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  Outcome outcome() const { return outcome_; }
  const std::string& path() const { return path_; }
  // kHeldByAnother: " (pid N)" when the holder wrote its pid, else empty.
  std::string holder() const { return holder_.empty() ? "" : " (pid " + holder_ + ")"; }
  // kUnsupported: why the lock could not be taken (errno's text).
  const std::string& reason() const { return reason_; }

 private:
  std::string path_;
  int fd_ = -1;  // open only while locked
  Outcome outcome_ = Outcome::kLocked;
  std::string holder_;
  std::string reason_;
};

}  // namespace poplar
