// Checks shared by the settings of every worker run the agent starts for a request,
// profiling (profiler.h) and training (node_job.h) alike.
#pragma once

#include <string>

namespace poplar {

// A request's precision: empty means "fp32"; otherwise it is returned as given.
std::string PrecisionOrDefault(const std::string& requested);
// Throws InputError("precision") unless `precision` is "fp32" or "bf16".
void RequireWorkerPrecision(const std::string& precision);
// Throws InputError("model_config_json") unless `json_text` is a JSON object.
void RequireModelConfigObject(const std::string& json_text);

}  // namespace poplar
