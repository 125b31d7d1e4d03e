// Request paths stay inside the agent's work directory; job ids are plain names.
#include "agent/work_dir.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "planner/base/input_error.h"
#include "planner/formats/job_id.h"
#include "test_support.h"

namespace poplar {
namespace {

using poplar::testing::ScratchDir;

TEST(WorkDir, ResolvesPathsInside) {
  ScratchDir dir("work");
  const std::string root = std::filesystem::canonical(dir.path()).string();
  EXPECT_EQ(ResolveInside(dir.path(), "data/tokens.bin", "data_path"), root + "/data/tokens.bin");
  EXPECT_EQ(ResolveInside(dir.path(), "a/../tokens.bin", "data_path"), root + "/tokens.bin");
}

TEST(WorkDir, RefusesPathsThatLeave) {
  ScratchDir dir("work");
  for (const std::string bad : {"../x", "/etc/passwd", "a/../../x", "", ".", "a/.."}) {
    EXPECT_THROW(ResolveInside(dir.path(), bad, "data_path"), InputError) << bad;
  }
  std::filesystem::create_directory_symlink("/etc", dir.path() + "/escape");
  try {
    ResolveInside(dir.path(), "escape/passwd", "data_path");
    FAIL() << "a symbolic link out of the work directory was followed";
  } catch (const InputError& error) {
    EXPECT_EQ(error.file(), "data_path");
    EXPECT_NE(error.reason().find("outside the agent's work directory"), std::string::npos);
  }
}

TEST(WorkDir, JobIdsArePlainNames) {
  EXPECT_NO_THROW(CheckJobId("lab-20261121_1.2"));
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "../x", "a/b", "a b", std::string(65, 'x')}) {
    EXPECT_THROW(CheckJobId(bad), InputError) << bad;
  }
}

}  // namespace
}  // namespace poplar
