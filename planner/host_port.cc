#include "planner/host_port.h"

namespace poplar {

std::string HostPortProblem(const std::string& address, int least_port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return "must be host:port, got '" + address + "'";
  }
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535 ||
      std::stoi(port) < least_port) {
    return "port must be a number from " + std::to_string(least_port) +
           (least_port == 0 ? " (any free port)" : "") + " to 65535, got '" + port + "'";
  }
  return "";
}

}  // namespace poplar
