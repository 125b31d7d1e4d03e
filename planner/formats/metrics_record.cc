#include "planner/formats/metrics_record.h"

#include <algorithm>
#include <cmath>

namespace poplar {

std::optional<double> RecordNumber(const nlohmann::json& record, const char* key) {
  if (!record.is_object()) return std::nullopt;
  const auto found = record.find(key);
  if (found == record.end() || !found->is_number() || !std::isfinite(found->get<double>())) return std::nullopt;
  return found->get<double>();
}

std::optional<double> IdleSeconds(const nlohmann::json& record) {
  const auto step = RecordNumber(record, "step_s"), compute = RecordNumber(record, "compute_s");
  if (!step || !compute) return std::nullopt;
  return std::max(0.0, *step - *compute - RecordNumber(record, "optimizer_s").value_or(0));
}

}  // namespace poplar
