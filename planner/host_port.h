// "host:port" addresses in poplar's files: an agent's `listen`, a cluster node's `agent`.
#pragma once

#include <string>

namespace poplar {

// Why `address` is not host:port with a port from `least_port` to 65535 ("" if it is):
// text on both sides of the last ':', the port in decimal digits. gRPC itself would
// take port 99999 as 34463 and "host:" as port 443.
std::string HostPortProblem(const std::string& address, int least_port);

}  // namespace poplar
