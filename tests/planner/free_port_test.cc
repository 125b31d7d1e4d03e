#include "planner/base/free_port.h"

#include <gtest/gtest.h>

#include <set>

#include "test_support.h"

namespace poplar {
namespace {

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
    EXPECT_TRUE(testing::HeldPort(port).held()) << port;
    ports.insert(port);
  }
  // Drawn at random, so that two jobs starting together rarely pick the same one.
  EXPECT_GT(ports.size(), 10u);
}

}  // namespace
}  // namespace poplar
