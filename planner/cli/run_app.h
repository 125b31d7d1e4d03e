// RunApp: the error policy shared by the `poplar` and `poplar-worker` command lines.
// Parses, runs the chosen subcommand (its callback), and turns every outcome into one
// line on stderr and an exit status:
//   0 success; 1 bad input (InputError: file, key, reason), or, when
//   `runtime_errors_fail`, any failure while running (a libtorch or Gloo error, a dead
//   peer, out of memory); 2 bad usage (flags, a missing command); 70 internal error.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace poplar {

// `program` starts usage messages ("poplar plan: ..."); `speaker` starts error lines
// ("poplar-worker[rank 1]: error: ..."); `commands` lists the subcommands for the
// message when none is given.
int RunApp(CLI::App& app, int argc, char** argv, const std::string& program,
           const std::string& speaker, const std::string& commands, bool runtime_errors_fail);

}  // namespace poplar
