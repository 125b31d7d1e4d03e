#include "planner/cli/run_app.h"

#include <cmath>
#include <cstdlib>
#include <iostream>

#include "planner/input_error.h"

namespace poplar {
namespace {

// The first line of a message (libtorch appends a C++ backtrace to its own).
std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

CLI::Validator NumberWhere(std::function<bool(double)> ok, const std::string& what, bool whole) {
  return CLI::Validator(
      [ok = std::move(ok), what, whole](std::string& text) {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool number = !text.empty() && *end == '\0' && std::isfinite(value);
        if (number && (!whole || value == std::floor(value)) && ok(value)) return std::string();
        return "must be " + what + ", got '" + text + "'";
      },
      what);
}

int RunApp(CLI::App& app, int argc, char** argv, const std::string& program,
           const std::string& speaker, const std::string& commands, bool runtime_errors_fail) {
  // At most one command; "none" is reported here, after CLI11 has had the chance to name
  // an unknown flag or command (require_subcommand(1) would hide it).
  if (!commands.empty()) app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
    if (!commands.empty() && app.get_subcommands().empty()) {
      std::cerr << program << ": a command is required: " << commands << " (see '" << program
                << " --help')\n";
      return 2;
    }
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    std::string command = program;
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::string what = error.what();
    // A first word that is not a command ("poplar plna", "poplar help"): say so.
    const std::vector<std::string> extras = app.remaining();
    if (!commands.empty() && app.get_subcommands().empty() && !extras.empty() && extras.front().rfind("-", 0) != 0) {
      what = "unknown command '" + extras.front() + "'; the commands are " + commands;
    }
    std::cerr << command << ": " << what << " (see '" << command << " --help')\n";
    return 2;
  } catch (const InputError& error) {
    std::cerr << speaker << ": error: " << error.what() << "\n";
    return 1;
  } catch (const CommandFailed& error) {
    std::cerr << speaker << ": error: " << error.what() << "\n";
    return error.exit_code();
  } catch (const std::exception& error) {
    std::cerr << speaker << (runtime_errors_fail ? ": error: " : ": internal error: ")
              << FirstLine(error.what()) << "\n";
    return runtime_errors_fail ? 1 : 70;
  } catch (...) {
    std::cerr << speaker << ": internal error: an unknown exception\n";
    return 70;
  }
  return 0;
}

}  // namespace poplar
