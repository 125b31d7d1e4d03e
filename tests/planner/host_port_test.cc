#include "planner/base/host_port.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

TEST(HostPortProblem, NamesWhatIsWrongWithAnAddress) {
  EXPECT_EQ(HostPortProblem("10.0.0.1:7150", 1), "");
  EXPECT_NE(HostPortProblem("10.0.0.1", 1), "");
  EXPECT_NE(HostPortProblem("10.0.0.1:99999", 1), "");
  EXPECT_NE(HostPortProblem("host:", 1), "");
}

// Rank 0 refuses a MASTER_ADDR that no address of this machine answers to.
TEST(CouldBeThisMachine, TellsThisMachinesAddressesFromAnothers) {
  EXPECT_TRUE(CouldBeThisMachine("127.0.0.1"));
  EXPECT_TRUE(CouldBeThisMachine("localhost"));
  EXPECT_FALSE(CouldBeThisMachine("192.0.2.1")) << "TEST-NET-1 is no one's address";
  // A name that does not resolve is left to the connection to report.
  EXPECT_TRUE(CouldBeThisMachine("no-such-host.invalid"));
}

// Every rank refuses a MASTER_ADDR that names no machine at once, rather than waiting
// out --timeout in c10d's "client socket has timed out". (A name with a space is refused by
// the resolver itself, without asking DNS, so this holds offline.)
TEST(UnresolvableHostProblem, SaysWhenAHostNamesNoMachine) {
  EXPECT_EQ(UnresolvableHostProblem("127.0.0.1"), "");
  EXPECT_EQ(UnresolvableHostProblem("localhost"), "");
  EXPECT_NE(UnresolvableHostProblem("127.0.0.1 "), "");
}

}  // namespace
}  // namespace poplar
