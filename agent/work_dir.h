// Confinement of request paths to the agent's work directory (docs/operations.md,
// security): a caller may name files only inside it, and job ids are plain names, so no
// request can make the agent read or write anywhere else.
#pragma once

#include <string>

#include "planner/base/folder_lock.h"

namespace poplar {

// The absolute path of `relative` inside `work_dir`, following symbolic links.
// Throws InputError(`field`) if `relative` is empty or absolute, or if it (or a link
// in it) leads outside `work_dir`.
std::string ResolveInside(const std::string& work_dir, const std::string& relative, const std::string& field);

// An exclusive lock (flock) on <work_dir>/.agent.lock, held for the agent's life and
// released by the kernel however it ends. A second agent on the same work_dir (on
// another port, or started by hand beside systemd's) would run jobs and write
// checkpoints in the same folders, each taking the devices for its own.
class WorkDirLock {
 public:
  // Throws InputError naming `config_file` and work_dir, with the holder's pid, when
  // another process holds the lock.
  WorkDirLock(const std::string& work_dir, const std::string& config_file);

  const std::string& path() const { return lock_.path(); }  // the lock file

 private:
  FolderLock lock_;
};

}  // namespace poplar
