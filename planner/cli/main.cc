// `poplar`: the head-node command line. Wires the subcommands together and turns
// errors into one line on stderr and an exit status:
//   0 success, 1 bad input (files, keys, values), 2 bad usage (flags), 70 internal error.
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/input_error.h"

int main(int argc, char** argv) {
  CLI::App app{"poplar: ZeRO data-parallel training over heterogeneous GPU clusters", "poplar"};
  // At most one command; none is handled below, after CLI11 has had the chance to name
  // an unknown flag or command (require_subcommand would hide it).
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "poplar 0.1.0");
  app.footer("Run 'poplar COMMAND --help' for a command's flags. Docs: docs/README.md");
  poplar::RegisterPlanCommand(app);
  poplar::RegisterSimulateCommand(app);
  poplar::RegisterEstimateMemoryCommand(app);
  poplar::RegisterPrepareDataCommand(app);

  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::cerr << "poplar: a command is required: plan, simulate, estimate-memory or prepare-data "
                   "(see 'poplar --help')\n";
      return 2;
    }
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    std::string command = "poplar";
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::cerr << command << ": " << error.what() << " (see '" << command << " --help')\n";
    return 2;
  } catch (const poplar::InputError& error) {
    std::cerr << "poplar: error: " << error.what() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "poplar: internal error: " << error.what() << "\n";
    return 70;
  }
  return 0;
}
