#include "planner/base/run_app.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/spelling.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

// Every command the program declares (get_subcommands() alone gives the parsed ones).
std::vector<CLI::App*> Commands(CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// The program's command named `word`, or null (CLI11 2.3 has no get_subcommand_no_throw).
CLI::App* CommandNamed(CLI::App& app, const std::string& word) {
  for (CLI::App* sub : Commands(app)) {
    if (sub->check_name(word)) return sub;
  }
  return nullptr;
}

// The first option (--name, --name=value, -n) of the command line that neither the
// chosen command nor the program knows, as a usage message; "" if there is none.
// CLI11 names unknown options only after every other check (`poplar plan --bogus x`
// would hear that file x does not exist); a misspelt flag is the likelier mistake, so it
// is named first, with the nearest known option.
std::string UnknownOption(CLI::App& app, int argc, char** argv) {
  CLI::App* command = &app;
  const auto known = [&](const std::string& name) -> const CLI::Option* {
    if (const CLI::Option* option = command->get_option_no_throw(name)) return option;
    return app.get_option_no_throw(name);
  };
  bool value_next = false;  // the word is a known option's value ("--min-lr -inf"), not an option
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (value_next) {
      value_next = false;
      continue;
    }
    if (word == "--") break;
    if (word.rfind("-", 0) != 0) {
      if (command == &app && !Commands(app).empty()) {
        command = CommandNamed(app, word);
        if (command == nullptr) return "";  // an unknown command comes first (RunApp names it)
      }
      continue;
    }
    if (word.size() < 2 || word == "--") continue;
    if (word[1] != '-') {
      // A short option ("-o", "-ofile"); "-1", "-.5" are values.
      if (std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.') continue;
      const std::string name = word.substr(0, 2);
      const CLI::Option* option = known(name);
      if (option == nullptr) return "unknown option '" + name + "'";
      value_next = word.size() == 2 && option->get_items_expected_min() > 0;
      continue;
    }
    const std::string name = word.substr(0, word.find('='));
    if (const CLI::Option* option = known(name)) {
      value_next = word.find('=') == std::string::npos && option->get_items_expected_min() > 0;
      continue;
    }
    std::vector<std::string> names;
    for (const CLI::App* owner : {static_cast<const CLI::App*>(command), static_cast<const CLI::App*>(&app)}) {
      for (const CLI::Option* option : owner->get_options()) {
        for (const std::string& long_name : option->get_lnames()) names.push_back("--" + long_name);
      }
    }
    return "unknown option '" + name + "'" + DidYouMean(name, names);
  }
  return "";
}

// One line to stderr in one write: ranks sharing a terminal printed their prefixes and
// messages piece by piece, mid-line into each other ("poplar-worker[rank 1]poplar-worker[rank 0]: error:").
void PrintLine(const std::string& line) {
  const std::string text = line + "\n";
  std::cerr.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cerr.flush();
}

}  // namespace

CLI::Validator NumberWhere(std::function<bool(double)> ok, const std::string& what, bool whole) {
  return CLI::Validator(
      [ok = std::move(ok), what, whole](std::string& text) {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool number = !text.empty() && *end == '\0' && std::isfinite(value);
        // A whole number in decimal digits, as CLI11 converts it ("1e3" it would refuse).
        const bool digits = text.find_first_not_of("+-0123456789") == std::string::npos;
        if (number && (!whole || digits) && ok(value)) return std::string();
        return "must be " + what + ", got '" + text + "'";
      },
      what);
}

CLI::Validator WholeNumberIn(std::int64_t low, std::int64_t high) {
  // Doubles hold every bound used (at most 2^50) exactly.
  return NumberWhere([low, high](double v) { return v >= low && v <= high; },
                     "a whole number from " + std::to_string(low) + " to " + std::to_string(high), true);
}

CLI::Validator NotEmpty() {
  return CLI::Validator([](std::string& text) { return text.empty() ? std::string("must not be empty") : ""; }, "");
}

int RunApp(CLI::App& app, int argc, char** argv, const std::string& program, const std::string& speaker,
           const std::string& commands, bool runtime_errors_fail,
           const std::function<void(const std::string& command, const std::string& message)>& on_usage_error) {
  // At most one command; "none" is reported here, after CLI11 has had the chance to name
  // an unknown flag or command (require_subcommand(1) would hide it).
  if (!commands.empty()) app.require_subcommand(0, 1);
  // "poplar plan: what (see 'poplar plan --help')" on stderr, for the command `name` ("":
  // none was chosen), and the hook.
  const auto usage_error = [&](const std::string& name, const std::string& what) {
    const std::string command = name.empty() ? program : program + " " + name;
    const std::string message = command + ": " + what + " (see '" + command + " --help')";
    PrintLine(message);
    if (on_usage_error) on_usage_error(name, message);
    return 2;
  };
  try {
    if (const std::string unknown = UnknownOption(app, argc, argv); !unknown.empty()) {
      std::string name;
      for (int i = 1; i < argc; ++i) {
        if (argv[i][0] == '-') continue;
        if (CommandNamed(app, argv[i]) != nullptr) name = argv[i];
        break;
      }
      return usage_error(name, unknown);
    }
    app.parse(argc, argv);
    if (!commands.empty() && app.get_subcommands().empty()) {
      return usage_error("", "a command is required: " + commands);
    }
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    std::string what = error.what();
    // A first word that is not a command ("poplar plna", "poplar help"): say so.
    const std::vector<std::string> extras = app.remaining();
    if (!commands.empty() && chosen.empty() && !extras.empty() && extras.front().rfind("-", 0) != 0) {
      std::vector<std::string> names;
      for (const CLI::App* sub : Commands(app)) {
        names.push_back(sub->get_name());
      }
      const std::string suggestion = DidYouMean(extras.front(), names);
      what = "unknown command '" + extras.front() + "'" +
             (suggestion.empty() ? "; the commands are " + commands : suggestion);
    } else if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
      // CLI11 lists the arguments it did not expect bare, so an empty one ('') reads as
      // nothing: each is quoted.
      const std::vector<std::string> unexpected = chosen.empty() ? extras : chosen.front()->remaining();
      if (!unexpected.empty()) {
        what = std::string(unexpected.size() == 1 ? "unexpected argument " : "unexpected arguments ") +
               Join(unexpected, ", ", [](const std::string& argument) {
                 return "'" + Printable(argument) + "'" + (argument.empty() ? " (an empty argument)" : "");
               });
      }
    }
    // CLI11 says "--output: At Most 1 required but received 2" of a flag given twice.
    const std::string at_most_once = ": At Most 1 required but received ";
    if (const auto at = what.find(at_most_once);
        dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr && at != std::string::npos) {
      what = what.substr(0, at) + " is given " + what.substr(at + at_most_once.size()) + " times; give it once";
    }
    return usage_error(chosen.empty() ? "" : chosen.front()->get_name(), what);
  } catch (const InputError& error) {
    PrintLine(speaker + ": error: " + error.what());
    return 1;
  } catch (const CommandFailed& error) {
    PrintLine(speaker + ": error: " + error.what());
    return error.exit_code();
  } catch (const std::exception& error) {
    PrintLine(speaker + (runtime_errors_fail ? ": error: " : ": internal error: ") + FirstLine(error.what()));
    return runtime_errors_fail ? 1 : 70;
  } catch (...) {
    PrintLine(speaker + ": internal error: an unknown exception");
    return 70;
  }
  return 0;
}

}  // namespace poplar
