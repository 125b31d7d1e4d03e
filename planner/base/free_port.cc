#include "planner/base/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace poplar {
namespace {

// Binds a TCP socket to `port` on every IPv4 address (0: one the kernel picks) and
// returns the port bound, or 0 when it is taken; closes the socket again.
int TryBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t length = sizeof(address);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  if (bound) return ntohs(address.sin_port);
  if (error == EADDRINUSE || error == EACCES) return 0;
  throw std::runtime_error(std::string("finding a free port: ") + std::strerror(error));
}

}  // namespace

std::pair<int, int> EphemeralPortRange() {
  std::ifstream file("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  int last = 0;
  if (file >> first >> last && 0 < first && first <= last && last <= 65535) return {first, last};
  return {32768, 60999};
}

int FindFreePort() {
  // Below the ephemeral range: from half its first port (16384 by default) up to it.
  const int ephemeral_first = EphemeralPortRange().first;
  const int low = std::max(1024, ephemeral_first / 2);
  const int high = ephemeral_first - 1;
  if (low < high) {
    std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> pick(low, high);
    for (int attempt = 0; attempt < 200; ++attempt) {
      if (const int port = TryBind(pick(random)); port != 0) return port;
    }
  }
  // A machine whose ephemeral range leaves no room below it: the kernel's choice.
  if (const int port = TryBind(0); port != 0) return port;
  throw std::runtime_error("finding a free port: every port tried is in use");
}

}  // namespace poplar
