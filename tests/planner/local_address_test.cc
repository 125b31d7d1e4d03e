#include "planner/base/local_address.h"

#include <gtest/gtest.h>

namespace poplar {
namespace {

// Loopback toward loopback; nothing toward a name that does not resolve. (Toward another
// machine: Partition.ANodeCutOffMidTrainingEndsTheJobWithItsCause, across namespaces.)
TEST(LocalAddressToward, IsTheSourceAddressOfTheRoute) {
  EXPECT_EQ(LocalAddressToward("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(LocalAddressToward("127.0.0.5"), "127.0.0.1");
  EXPECT_EQ(LocalAddressToward("no-such-host.invalid"), "");
  EXPECT_EQ(LocalAddressToward(""), "");
}

}  // namespace
}  // namespace poplar
