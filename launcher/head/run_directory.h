// The run directory of `poplar launch` (docs/formats.md, "Run directory"): which job it
// belongs to, what a resume keeps of the attempts before it, and cleaning up after a
// launch refused before it started.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace poplar {

class RunDirectory {
 public:
  // Opens `path` for job `job_id`, making it if missing, and removes the temporaries a
  // head that died left there (`summary.json.tmp.PID` of a PID no longer running).
  // Throws InputError naming
  // --run-dir, before anything is made or changed:
  //  - if it holds a plan.json or profiles/ but no run (no job_id file, summary.json,
  //    logs/ or metrics/): `poplar plan`'s output, which a resume would move into
  //    attempts/;
  //  - without `resume`, if it already holds a run (any of those four);
  //  - with `resume`, if it holds the run of another job (its job_id file, or for a
  //    directory written before that file existed, its summary.json's job_id).
  RunDirectory(const std::string& path, const std::string& job_id, bool resume);
  // If this launch fails before Keep(), the folders it made go again (runs/ too when it
  // made that), the files it wrote go, and the previous attempt's files move back, so a
  // refused launch leaves the directory as it found it.
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // On resume: moves the previous attempt's plan.json, summary.json and profiles/ into
  // attempts/N/ (N = 1, 2, ...: the first free), so that the new attempt's files never
  // replace them. Logs and metrics stay where they are and are appended to. Returns the
  // folder they went to, empty when there was nothing to keep.
  std::string KeepPreviousAttempt();
  // Before the launch writes its own files here (profiles/, plan.json): writes the
  // job_id file, so that a head that dies from here on (SIGKILL, a second Ctrl-C) leaves
  // a directory that says whose run it is, which --resume goes on in. Until Keep(), a
  // refused launch still removes it again.
  void Record();
  // A worker has started: writes the job_id file and keeps the directory.
  void Keep();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string job_id_;
  std::filesystem::path made_;                // empty: the directory was there already
  std::filesystem::path attempt_;             // where KeepPreviousAttempt moved files to
  std::vector<std::string> moved_;            // the names it moved there
  std::vector<std::string> present_at_open_;  // of the names a launch writes, those already there
  bool kept_ = false;
};

}  // namespace poplar
