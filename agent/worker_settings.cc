#include "agent/worker_settings.h"

#include "planner/formats/model_config.h"

namespace poplar {

std::string PrecisionOrDefault(const std::string& requested) { return requested.empty() ? "fp32" : requested; }

void RequireModelConfig(const std::string& json_text) { ParseModelConfig(json_text, "model_config_json"); }

}  // namespace poplar
