#include "planner/formats/train_command.h"

namespace poplar {

std::vector<std::string> TrainCommand(const TrainFiles& files, const TrainRun& run) {
  std::vector<std::string> args = {
      "train",           "--plan",          files.plan,          "--model-config", files.model,
      "--precision",     run.precision,     "--metrics",         files.metrics,    "--checkpoint-dir",
      files.checkpoints, "--plan-switches", files.plan_switches, "--save",         files.save};
  args.insert(args.end(), run.setting_flags.begin(), run.setting_flags.end());
  if (run.trace_step > 0)
    args.insert(args.end(), {"--trace", files.trace, "--trace-step", std::to_string(run.trace_step)});
  if (run.resume) args.insert(args.end(), {"--resume", files.checkpoints});
  if (run.require_checkpoint) args.push_back("--resume-required");
  if (run.timeout_s > 0) args.insert(args.end(), {"--timeout", std::to_string(run.timeout_s)});
  return args;
}

}  // namespace poplar
