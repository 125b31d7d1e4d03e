// The planner's subcommands of `poplar` (the head's are in launcher/head/head_commands.h). Each Register* adds one
// subcommand to the app with its flags and a callback that does the work; callbacks throw InputError for bad input
// (main turns it into one line on stderr and exit status 1).
#pragma once

#include <CLI/CLI.hpp>

namespace poplar {

void RegisterPlanCommand(CLI::App& app);
void RegisterSimulateCommand(CLI::App& app);
void RegisterEstimateMemoryCommand(CLI::App& app);
void RegisterPrepareDataCommand(CLI::App& app);

}  // namespace poplar
