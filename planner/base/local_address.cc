#include "planner/base/local_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

namespace poplar {

std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "";
  std::string address;
  for (const addrinfo* candidate = found; candidate != nullptr && address.empty(); candidate = candidate->ai_next) {
    const int socket_fd = socket(candidate->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (socket_fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (connect(socket_fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
        getsockname(socket_fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = local.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    close(socket_fd);
  }
  freeaddrinfo(found);
  return address;
}

}  // namespace poplar
