#include "planner/base/host_port.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace poplar {

std::string HostPortProblem(const std::string& address, int least_port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return "must be host:port, got '" + address + "'";
  }
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535 ||
      std::stoi(port) < least_port) {
    return "port must be a number from " + std::to_string(least_port) + (least_port == 0 ? " (any free port)" : "") +
           " to 65535, got '" + port + "'";
  }
  return "";
}

std::string UnresolvableHostProblem(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  // EAI_AGAIN (a resolver not answering now) is left to the connection's retries.
  if (error == EAI_NONAME || error == EAI_FAIL) return gai_strerror(error);
  return "";
}

bool CouldBeThisMachine(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return true;
  // Another machine's only when some address was refused as not this machine's
  // (EADDRNOTAVAIL) and none was not: any other refusal (permissions, a family not
  // configured) is not ours to judge.
  bool ours = false;
  bool foreign = false;
  for (const addrinfo* address = found; address != nullptr && !ours; address = address->ai_next) {
    const int fd = ::socket(address->ai_family, address->ai_socktype, address->ai_protocol);
    if (fd < 0) continue;
    // Port 0 (getaddrinfo without a service): any free port, released at once.
    const bool not_here = ::bind(fd, address->ai_addr, address->ai_addrlen) != 0 && errno == EADDRNOTAVAIL;
    ::close(fd);
    (not_here ? foreign : ours) = true;
  }
  ::freeaddrinfo(found);
  return ours || !foreign;
}

}  // namespace poplar
