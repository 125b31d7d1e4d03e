#include "agent/work_dir.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "planner/base/input_error.h"

namespace poplar {

namespace fs = std::filesystem;

std::string ResolveInside(const std::string& work_dir, const std::string& relative, const std::string& field) {
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

WorkDirLock::WorkDirLock(const std::string& work_dir, const std::string& config_file)
    : lock_([&] {
        try {
          return FolderLock(work_dir, ".agent.lock");
        } catch (const std::runtime_error& error) {
          throw InputError(config_file, "work_dir", error.what());
        }
      }()) {
  switch (lock_.outcome()) {
    case FolderLock::Outcome::kLocked:
      return;
    case FolderLock::Outcome::kUnsupported:
      throw InputError(config_file, "work_dir",
                       "cannot lock " + lock_.path() + ": " + lock_.reason() +
                           "; the work_dir must be on a file system with locks (a local disk)");
    case FolderLock::Outcome::kHeldByAnother:
      throw InputError(config_file, "work_dir",
                       work_dir + " is in use by another poplar-agent" + lock_.holder() +
                           "; each agent needs a work_dir of its own");
  }
}

}  // namespace poplar
