// A rank's metrics record (docs/worker.md, "Metrics"), as the head and the agent read
// it: a JSON object that a worker on another node wrote, read leniently, since an odd
// record must stop neither the launch nor the agent's metrics endpoint.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace poplar {

// The finite number at `key`, or nothing: absent, null (a worker writes nan as null),
// not a number, or a record that is not an object.
std::optional<double> RecordNumber(const nlohmann::json& record, const char* key);

// What the step's time held besides the rank's own work, step_s less compute_s and
// optimizer_s (an absent optimizer_s counting 0), at least 0: its waiting for the others.
// Nothing without step_s and compute_s.
std::optional<double> IdleSeconds(const nlohmann::json& record);

}  // namespace poplar
