// A TCP port that no socket of this machine is bound to, as the kernel picks one for a
// bind to port 0 on every IPv4 address. The socket is closed again, so the port is
// free, not reserved: whoever binds it next gets it (the same window torchrun accepts).
#pragma once

namespace poplar {

// Throws std::runtime_error naming the system call that failed.
int FindFreePort();

}  // namespace poplar
