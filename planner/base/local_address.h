// Which of this machine's addresses the others reach it at.
#pragma once

#include <string>

namespace poplar {

// The address of this machine that a connection to `host` leaves from: the source
// address the kernel chooses by its routes (a UDP socket connected toward `host`; no
// packet is sent). "127.0.0.1" toward loopback; the address of the interface that leads
// to another machine. Empty when `host` does not resolve or no route leads to it.
std::string LocalAddressToward(const std::string& host);

}  // namespace poplar
