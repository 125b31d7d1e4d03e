#include "planner/free_port.h"

#include <set>

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace poplar {
namespace {

// Binds `port` on every IPv4 address as a server would; true when it could.
bool CanListenOn(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return bound;
}

// A port from the ephemeral range could be taken by the local end of any outgoing
// connection (a Gloo pair, a store client) before the rendezvous binds it: the tests'
// rare "port in use" and "cannot reach rank 0" failures.
TEST(FindFreePort, GivesAPortBelowTheEphemeralRangeThatAServerCanBind) {
  const int ephemeral_first = EphemeralPortRange().first;
  std::set<int> ports;
  for (int i = 0; i < 20; ++i) {
    const int port = FindFreePort();
    EXPECT_GE(port, 1024);
    EXPECT_LT(port, ephemeral_first);
    EXPECT_TRUE(CanListenOn(port)) << port;
    ports.insert(port);
  }
  // Drawn at random, so that two jobs starting together rarely pick the same one.
  EXPECT_GT(ports.size(), 10u);
}

}  // namespace
}  // namespace poplar
