// What the settings of every worker run the agent starts for a request share,
// profiling (profiler.h) and training (node_job.h) alike. The precision itself is
// checked with planner/formats/precision.h's ParseWorkerPrecision.
#pragma once

#include <string>

namespace poplar {

// A request's precision: empty means "fp32"; otherwise it is returned as given.
std::string PrecisionOrDefault(const std::string& requested);
// Throws InputError naming "model_config_json" and the key unless `json_text` is a
// model configuration poplar-worker accepts (planner/formats/model_config.h), so that a bad
// model is refused by the agent, not by workers it has already started.
void RequireModelConfig(const std::string& json_text);

}  // namespace poplar
