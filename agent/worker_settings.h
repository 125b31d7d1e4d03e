// What the settings of every worker run the agent starts for a request share,
// profiling (profiler.h) and training (node_job.h) alike. The precision itself is
// checked with planner/precision.h's ParseWorkerPrecision.
#pragma once

#include <string>

namespace poplar {

// A request's precision: empty means "fp32"; otherwise it is returned as given.
std::string PrecisionOrDefault(const std::string& requested);
// Throws InputError("model_config_json") unless `json_text` is a JSON object.
void RequireModelConfigObject(const std::string& json_text);

}  // namespace poplar
