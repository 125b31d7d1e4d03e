#include "planner/input_error.h"

namespace poplar {
namespace {

std::string Compose(const std::string& file, const std::string& key, const std::string& reason) {
  std::string message = file;
  if (!key.empty()) message += ": " + key;
  return message + ": " + reason;
}

}  // namespace

InputError::InputError(std::string file, std::string key, std::string reason)
    : std::runtime_error(Compose(file, key, reason)),
      file_(std::move(file)),
      key_(std::move(key)),
      reason_(std::move(reason)) {}

}  // namespace poplar
