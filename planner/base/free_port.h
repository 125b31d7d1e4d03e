// A TCP port that no socket of this machine is bound to, for a server that binds it
// soon after (the rendezvous of a job, a test's agent). The socket that checked it is
// closed again, so the port is free, not reserved: whoever binds it next gets it.
//
// The port is drawn from below the kernel's ephemeral range (ip_local_port_range),
// never from it: the kernel gives ports of that range to the local end of outgoing
// connections, and a job opens many (every Gloo pair, every store client), so a port
// chosen there could be taken by a connection before its server binds it.
#pragma once

#include <utility>

namespace poplar {

// Throws std::runtime_error naming the system call that failed.
int FindFreePort();

// The first and last port of the kernel's ephemeral range; Linux's default (32768,
// 60999) when /proc does not say.
std::pair<int, int> EphemeralPortRange();

}  // namespace poplar
