// `poplar estimate-memory`: ZeRO model-state bytes per GPU for each stage.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "planner/base/input_error.h"
#include "planner/base/join.h"
#include "planner/base/run_app.h"
#include "planner/base/text_table.h"
#include "planner/cli/commands.h"
#include "planner/model/memory_model.h"

namespace poplar {
namespace {

struct EstimateOptions {
  std::string params;
  int gpus = 0;
  std::string precision = "mixed";
  bool json = false;
};

// "354823168", "355M", "1.5B", "1T", "7e9" -> parameter count; nullopt for anything
// else: a decimal number (digits, an optional fraction and exponent; no sign, blanks or
// hexadecimal) with an optional K, M, B (or G) or T, whose value is whole, from 1 to 1e15.
std::optional<std::int64_t> ParseCount(const std::string& text) {
  static const std::regex kCount(R"(([0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)([KkMmBbGTt]?))");
  std::smatch match;
  if (!std::regex_match(text, match, kCount)) return std::nullopt;
  double scale = 1;
  switch (match[4].length() > 0 ? match[4].str()[0] : ' ') {
    case 'K':
    case 'k':
      scale = 1e3;
      break;
    case 'M':
    case 'm':
      scale = 1e6;
      break;
    case 'B':
    case 'b':
    case 'G':
      scale = 1e9;
      break;
    case 'T':
    case 't':
      scale = 1e12;
      break;
  }
  // strtod, not stod: a number beyond a double's range (1e400) or below its normal range
  // (5e-324) is out of range here, as any other count beyond 1e15 or below 1.
  const double count = std::strtod(match[1].str().c_str(), nullptr) * scale;
  // A count is whole: 2.5 parameters is a typing mistake, not 3 (0.3M is 300000 only up
  // to the last bit of a double, hence the tolerance).
  if (!(count >= 1) || count > 1e15 || std::abs(count - std::round(count)) > 0.01) return std::nullopt;
  return std::llround(count);
}

void Run(const EstimateOptions& options) {
  const std::int64_t params = *ParseCount(options.params);  // checked by the flag's validator
  const Precision precision = *ParsePrecision(options.precision);
  if (options.json) {
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (int stage = 0; stage <= 3; ++stage) {
      const ModelStateBytes bytes = ModelStatesPerRank(params, stage, options.gpus, precision);
      stages.push_back({{"stage", stage},
                        {"parameters_bytes", bytes.parameters},
                        {"gradients_bytes", bytes.gradients},
                        {"optimizer_bytes", bytes.optimizer},
                        {"total_bytes", bytes.Total()}});
    }
    nlohmann::ordered_json out = {
        {"params", params}, {"gpus", options.gpus}, {"precision", PrecisionName(precision)}, {"stages", stages}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  TextTable table({"stage", "parameters", "gradients", "optimizer", "total per GPU"}, {false, true, true, true, true});
  for (int stage = 0; stage <= 3; ++stage) {
    const ModelStateBytes bytes = ModelStatesPerRank(params, stage, options.gpus, precision);
    table.AddRow(
        {std::to_string(stage), GiB(bytes.parameters), GiB(bytes.gradients), GiB(bytes.optimizer), GiB(bytes.Total())});
  }
  std::cout << "model states per GPU for " << params << " parameters on " << Count(options.gpus, "GPU") << " ("
            << PrecisionName(precision) << " Adam; activations not included)\n\n"
            << table.Render();
}

}  // namespace

void RegisterEstimateMemoryCommand(CLI::App& app) {
  auto options = std::make_shared<EstimateOptions>();
  CLI::App* command =
      app.add_subcommand("estimate-memory", "Model-state memory per GPU for each ZeRO stage (ZeRO paper accounting)");
  command->add_option("--params", options->params, "Parameter count, e.g. 354823168, 355M, 1.5B or 1T")
      ->required()
      ->check(CLI::Validator(
          [](std::string& text) {
            return ParseCount(text) ? std::string()
                                    : "expected a whole parameter count from 1 to 1e15 like 354823168, 355M, 1.5B or "
                                      "1T, got '" +
                                          text + "'";
          },
          "COUNT"));
  command->add_option("--gpus", options->gpus, "Number of GPUs (data-parallel ranks)")
      ->required()
      ->check(WholeNumberIn(1, 10'000'000));
  // The cluster file's names: bf16 and fp16 are mixed precision, as there.
  command->add_option("--precision", options->precision, "fp32, or mixed (also: bf16, fp16)")
      ->check(CLI::IsMember({"fp32", "mixed", "bf16", "fp16"}))
      ->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON document on stdout and nothing else");
  command->callback([options] { Run(*options); });
}

}  // namespace poplar
