// The shared token (planner/cluster/credentials.h): it travels as a gRPC header, so what gRPC
// would refuse at every call is refused when the file is read, without quoting it.
#include "planner/cluster/credentials.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;
using testing::ErrorOf;
using testing::ScratchDir;

TEST(ReadToken, TakesPrintableAsciiFrom16To4096Characters) {
  ScratchDir dir("credentials");
  const std::string good(64, 'a');
  EXPECT_EQ(ReadToken(dir.Write("good", "  " + good + "  \nsecond line\n")), good);
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadToken(dir.Write("short", "abc\n")); }), "at least 16 characters"));
  EXPECT_TRUE(Contains(ErrorOf([&] { ReadToken(dir.Write("huge", std::string(5000, 'a'))); }),
                       "at most 4096 characters, not 5000"));
  // A byte gRPC refuses as "Illegal metadata", printing the token: named by place only.
  const std::string secret = "Bearer0123456789";
  for (const std::string& odd : {secret + std::string(1, '\0') + "x", secret + "\xff", secret + " with space"}) {
    const std::string error = ErrorOf([&] { ReadToken(dir.Write("odd", odd + "\n")); });
    EXPECT_TRUE(Contains(error, "printable ASCII without spaces; character 17 is not")) << error;
    EXPECT_FALSE(Contains(error, secret)) << "the token is a secret: " << error;
  }
}

}  // namespace
}  // namespace poplar
