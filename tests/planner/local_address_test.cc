#include "planner/base/local_address.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace poplar {
namespace {

// Loopback toward loopback; nothing toward a name that does not resolve. (Toward another
// machine: Partition.ANodeCutOffMidTrainingEndsTheJobWithItsCause, across namespaces.)
TEST(LocalAddressToward, IsTheSourceAddressOfTheRoute) {
  const std::pair<std::string, std::string> expected[] = {
      {"127.0.0.1", "127.0.0.1"}, {"127.0.0.5", "127.0.0.1"}, {"no-such-host.invalid", ""}, {"", ""}};
  for (const auto& [host, address] : expected) EXPECT_EQ(LocalAddressToward(host), address) << host;
}

}  // namespace
}  // namespace poplar
