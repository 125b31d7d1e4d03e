// RunApp: the error policy shared by the `poplar` and `poplar-worker` command lines.
// Parses, runs the chosen subcommand (its callback), and turns every outcome into one
// line on stderr and an exit status:
//   0 success; 1 bad input (InputError: file, key, reason), or, when
//   `runtime_errors_fail`, any failure while running (a libtorch or Gloo error, a dead
//   peer, out of memory); 2 bad usage (flags, a missing command); a CommandFailed's own
//   status (command_failed.h: 3 for a worker failing because another rank did); 70
//   internal error.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "planner/base/command_failed.h"

namespace poplar {

// A flag's check: the value is a finite number (a whole one in decimal digits when
// `whole`) that `ok`
// accepts; otherwise "must be <what>, got <text>". Unlike CLI::PositiveNumber, it
// refuses nan and inf and names the bound in words.
CLI::Validator NumberWhere(std::function<bool(double)> ok, const std::string& what, bool whole = false);

// NumberWhere for a whole number from `low` to `high`: "must be a whole number from
// <low> to <high>, got '<text>'" (CLI::Range called "abc" and "1.5" out of range).
CLI::Validator WholeNumberIn(std::int64_t low, std::int64_t high);

// A flag's check: the value is not empty. An empty path or name given on purpose
// (`-o ''`) is a mistake; it must not quietly mean the default.
CLI::Validator NotEmpty();

// `program` starts usage messages ("poplar plan: ..."); `speaker` starts error lines
// ("poplar-worker[rank 1]: error: ..."); `commands` lists the subcommands for the
// message when none is given (empty: the program has no subcommands, its app's own
// callback does the work). `on_usage_error` (optional) is called with the chosen
// command ("" when none) and the usage message once it is printed, before RunApp
// returns 2: a worker rank tells the ranks waiting for it.
int RunApp(CLI::App& app, int argc, char** argv, const std::string& program, const std::string& speaker,
           const std::string& commands, bool runtime_errors_fail,
           const std::function<void(const std::string& command, const std::string& message)>& on_usage_error = {});

}  // namespace poplar
