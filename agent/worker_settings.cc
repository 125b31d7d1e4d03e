#include "agent/worker_settings.h"

#include <nlohmann/json.hpp>

#include "planner/input_error.h"

namespace poplar {

std::string PrecisionOrDefault(const std::string& requested) { return requested.empty() ? "fp32" : requested; }

void RequireModelConfigObject(const std::string& json_text) {
  if (!nlohmann::json::parse(json_text, nullptr, false).is_object()) {
    throw InputError("model_config_json", "", "is not a JSON object");
  }
}

}  // namespace poplar
