// "host:port" addresses in poplar's files: an agent's `listen`, a cluster node's `agent`;
// and whether a host is this machine (the rendezvous's MASTER_ADDR).
#pragma once

#include <string>

namespace poplar {

// Why `address` is not host:port with a port from `least_port` to 65535 ("" if it is):
// text on both sides of the last ':', the port in decimal digits. gRPC itself would
// take port 99999 as 34463 and "host:" as port 443.
std::string HostPortProblem(const std::string& address, int least_port);

// False when `host` (a name or a numeric address) resolves, and no address it resolves
// to can be bound on this machine (EADDRNOTAVAIL): it names another machine. True
// otherwise, also when it does not resolve (the caller's connection says why).
bool CouldBeThisMachine(const std::string& host);

// Why `host` names no machine ("" when it resolves, or when the resolver failed for a
// while only, which a later try may not): "no such host" for a name the resolver knows
// no address of, or an address that is none ("999.1.1.1", "127.0.0.1 ").
std::string UnresolvableHostProblem(const std::string& host);

}  // namespace poplar
