// The head node's subcommands of `poplar`: those that talk to the agents over gRPC. Each
// Register* adds one subcommand to the app with its flags and a callback that does the
// work; callbacks throw InputError for bad input, as the planner's commands do
// (planner/cli/commands.h).
#pragma once

#include <CLI/CLI.hpp>

namespace poplar {

void RegisterProfileCommand(CLI::App& app);
void RegisterLaunchCommand(CLI::App& app);
void RegisterStatusCommand(CLI::App& app);
void RegisterNetworkCommand(CLI::App& app);
void RegisterSwitchCommand(CLI::App& app);

// --master-port and --timeout, the rendezvous flags of every command that runs a job
// through the agents (launch, network).
// A job id as --job-id takes it (planner/formats/job_id.h), its reason in CLI11's error.
CLI::Validator JobIdValidator();

void AddRendezvousOptions(CLI::App* command, int& master_port, int& timeout_s);

}  // namespace poplar
