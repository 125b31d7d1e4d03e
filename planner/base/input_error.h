// InputError: the one error type of the planner library for bad user input.
//
// Every problem with a cluster file, a profile file, a plan file or a flag is raised
// as an InputError naming the file (or flag), the key inside it, and the reason, so
// that the command line can print one line a user can act on:
//
//   configs/lab.yaml: nodes[1].devices[0].count: must be a positive integer, got -2
//
// Programming errors (broken invariants) are not InputErrors; they are std::logic_error.
#pragma once

#include <stdexcept>
#include <string>

namespace poplar {

// `text` with control characters and bytes beyond ASCII escaped (\n, \x1b, \xff): one
// line of valid text (a gRPC string and a JSON document must be UTF-8) that a terminal
// prints as such.
std::string AsciiText(const std::string& text);
// `text` as an error message may quote it: AsciiText, clipped to its first 60
// characters when longer than 80 ("xxx... (100000 characters)").
std::string Printable(const std::string& text);

class InputError : public std::runtime_error {
 public:
  // `file` is a path or a flag name ("--params"); `key` is a dotted path inside the
  // file ("training.global_batch", "stages[2].points[0].compute_s"), empty when the
  // reason concerns the whole file. what() joins them with ": ", control characters and
  // bytes beyond ASCII escaped as AsciiText does (every message is one line of ASCII).
  InputError(std::string file, std::string key, std::string reason);

  const std::string& file() const { return file_; }
  const std::string& key() const { return key_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_;
  std::string key_;
  std::string reason_;
};

}  // namespace poplar
