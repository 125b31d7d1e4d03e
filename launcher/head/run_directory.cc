#include "launcher/head/run_directory.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;

// What a resume moves out of the way: everything a launch writes anew.
constexpr const char* kReplacedByEachAttempt[] = {"plan.json", "summary.json", "profiles"};
// What a launch appends to (the launch monitor makes them).
constexpr const char* kAppendedTo[] = {"logs", "metrics"};

// Removes the temporaries of the head's own files in `dir` whose writer died before its
// rename (a head killed while writing summary.json). Nothing else is touched: a run
// directory may be a folder of the user's.
void RemoveDeadWritersTemporaries(const fs::path& dir) {
  std::error_code error;
  for (const fs::path& entry : FolderEntries(dir)) {
    for (const char* own : {"plan.json", "summary.json", "job_id"}) {
      if (ProcessIsGone(AtomicWriteTemporaryOwner(entry.filename().string(), own))) fs::remove(entry, error);
    }
  }
}

// The job whose run `dir` holds: its job_id file, else its summary.json's job_id; empty
// when neither says.
std::string RecordedJobId(const fs::path& dir) {
  if (fs::exists(dir / "job_id")) {
    return Trimmed(ReadTextFile((dir / "job_id").string()));
  }
  if (fs::exists(dir / "summary.json")) {
    const auto summary = nlohmann::json::parse(ReadTextFile((dir / "summary.json").string()), nullptr, false);
    if (summary.is_object() && summary.contains("job_id") && summary["job_id"].is_string()) {
      return summary["job_id"].get<std::string>();
    }
  }
  return "";
}

}  // namespace

RunDirectory::RunDirectory(const std::string& path, const std::string& job_id, bool resume)
    : path_(path), job_id_(job_id) {
  const fs::path dir(path);
  // A run's own files: logs/ and metrics/ too, for a run of a head from before job_id that
  // died before its summary.
  const auto names = {"job_id", "summary.json", "logs", "metrics"};
  const bool holds_run =
      std::any_of(names.begin(), names.end(), [&](const char* name) { return fs::exists(dir / name); });
  if (!holds_run) {
    // `poplar plan`'s output (a plan.json, its profiles/ beside it) or the user's own: a
    // launch would write over them, a resume move them into attempts/.
    std::vector<std::string> found;
    if (fs::exists(dir / "plan.json")) found.push_back("plan.json");
    if (fs::exists(dir / "profiles")) found.push_back("profiles/");
    if (!found.empty()) {
      throw InputError("--run-dir", "",
                       path + " holds " + Join(found, " and ") +
                           " but no run of poplar launch (no job_id, summary.json, logs/ or "
                           "metrics/): is it a folder that poplar plan wrote? A run directory is the "
                           "launch's own: choose another --run-dir (the default is runs/<job id>)");
    }
  } else if (!resume) {
    throw InputError("--run-dir", "", path + " already holds a run; choose another --run-dir or --job-id, or --resume");
  }
  if (resume) {
    const std::string recorded = RecordedJobId(dir);
    if (!recorded.empty() && recorded != job_id) {
      throw InputError("--run-dir", "",
                       path + " holds the run of job '" + recorded + "', not of job '" + job_id + "'; resume job '" +
                           job_id + "' with its own run directory");
    }
  }
  // The outermost folder that is missing (the walk ends at the root, which exists).
  for (fs::path folder = fs::absolute(path); !fs::exists(folder); folder = folder.parent_path()) made_ = folder;
  for (const char* name : kReplacedByEachAttempt) {
    if (fs::exists(dir / name)) present_at_open_.push_back(name);
  }
  for (const char* name : kAppendedTo) {
    if (fs::exists(dir / name)) present_at_open_.push_back(name);
  }
  if (fs::exists(dir / "job_id")) present_at_open_.push_back("job_id");
  MakeOutputFolder(path, "--run-dir");
  RemoveDeadWritersTemporaries(dir);
}

RunDirectory::~RunDirectory() {
  if (kept_) return;
  std::error_code ignored;
  if (!made_.empty()) {
    fs::remove_all(made_, ignored);
    return;
  }
  // Back as it was: what this refused attempt wrote goes, what it moved comes back.
  const fs::path dir(path_);
  auto listed = [](const std::vector<std::string>& names, const char* name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const char* name : kReplacedByEachAttempt) {
    if (!listed(present_at_open_, name) || listed(moved_, name)) fs::remove_all(dir / name, ignored);
  }
  for (const char* name : kAppendedTo) {
    if (!listed(present_at_open_, name)) fs::remove(dir / name, ignored);  // only if empty: nothing ran
  }
  if (!listed(present_at_open_, "job_id")) fs::remove(dir / "job_id", ignored);  // Record's
  for (const std::string& name : moved_) fs::rename(attempt_ / name, dir / name, ignored);
  if (!attempt_.empty()) {
    fs::remove(attempt_, ignored);                // only if empty: all moved back
    fs::remove(attempt_.parent_path(), ignored);  // attempts/, if this was its only one
  }
}

std::string RunDirectory::KeepPreviousAttempt() {
  const fs::path dir(path_);
  bool any = false;
  for (const char* name : kReplacedByEachAttempt) any = any || fs::exists(dir / name);
  if (!any) return "";
  int n = 1;
  while (fs::exists(dir / "attempts" / std::to_string(n))) ++n;
  attempt_ = dir / "attempts" / std::to_string(n);
  MakeOutputFolder(attempt_.string(), "--run-dir");
  for (const char* name : kReplacedByEachAttempt) {
    if (!fs::exists(dir / name)) continue;
    fs::rename(dir / name, attempt_ / name);  // same file system: never a copy
    moved_.push_back(name);
  }
  return attempt_.string();
}

void RunDirectory::Record() { WriteFileAtomically((fs::path(path_) / "job_id").string(), job_id_ + "\n"); }

void RunDirectory::Keep() {
  Record();
  kept_ = true;
}

}  // namespace poplar
