// `poplar`: the head-node command line. Wires the subcommands together; RunApp turns
// errors into one line on stderr and an exit status (0 success, 1 bad input, 2 bad
// usage, 70 internal error).
#include <CLI/CLI.hpp>
#include <csignal>

#include "launcher/head/head_commands.h"
#include "planner/base/run_app.h"
#include "planner/cli/commands.h"

int main(int argc, char** argv) {
  // A reader that goes away (`| head`, a `| tee` killed) makes writes to stdout fail, not
  // the command: a launch trains on, and its run directory keeps what is printed.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"poplar: ZeRO data-parallel training over heterogeneous GPU clusters", "poplar"};
  app.set_version_flag("--version", "poplar " POPLAR_VERSION);
  app.footer("Run 'poplar COMMAND --help' for a command's flags. Docs: docs/README.md");
  poplar::RegisterPlanCommand(app);
  poplar::RegisterSimulateCommand(app);
  poplar::RegisterEstimateMemoryCommand(app);
  poplar::RegisterPrepareDataCommand(app);
  poplar::RegisterProfileCommand(app);
  poplar::RegisterLaunchCommand(app);
  poplar::RegisterStatusCommand(app);
  poplar::RegisterSwitchCommand(app);
  poplar::RegisterNetworkCommand(app);

  return poplar::RunApp(app, argc, argv, "poplar", "poplar",
                        "plan, simulate, estimate-memory, prepare-data, profile, network, launch or status",
                        /*runtime_errors_fail=*/false);
}
