#include "planner/base/folder_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "planner/base/text_file.h"
#include "test_support.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::ScratchDir;

// Another process holds the lock: the second is told which, and a holder killed with
// SIGKILL leaves no stale lock behind.
TEST(FolderLock, IsHeldByOneProcessAtATimeAndFreedWhenItDies) {
  ScratchDir dir("folder-lock");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    const FolderLock lock(dir.path(), ".lock");
    const char said = lock.outcome() == FolderLock::Outcome::kLocked ? 'y' : 'n';
    (void)!::write(ready[1], &said, 1);
    ::pause();
    ::_exit(0);
  }
  struct KillAtEnd {  // a failed ASSERT must not leave the holder paused forever
    pid_t pid;
    ~KillAtEnd() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } kill_at_end{holder};
  char said = 0;
  ASSERT_EQ(::read(ready[0], &said, 1), 1);
  EXPECT_EQ(said, 'y');
  {
    const FolderLock second(dir.path(), ".lock");
    EXPECT_EQ(second.outcome(), FolderLock::Outcome::kHeldByAnother);
    EXPECT_EQ(second.holder(), " (pid " + std::to_string(holder) + ")");
  }
  ::kill(holder, SIGKILL);
  ASSERT_EQ(::waitpid(holder, nullptr, 0), holder);
  kill_at_end.pid = -1;
  const FolderLock after(dir.path(), ".lock");
  EXPECT_EQ(after.outcome(), FolderLock::Outcome::kLocked);
  ::close(ready[0]);
  ::close(ready[1]);
}

// flock belongs to the open file: a second lock in the same process is refused too, and
// a moved lock stays held until its last owner goes.
TEST(FolderLock, AMovedLockStaysHeld) {
  ScratchDir dir("folder-lock");
  std::optional<FolderLock> moved;
  {
    FolderLock first(dir.path(), ".lock");
    ASSERT_EQ(first.outcome(), FolderLock::Outcome::kLocked);
    moved.emplace(std::move(first));
  }
  EXPECT_EQ(FolderLock(dir.path(), ".lock").outcome(), FolderLock::Outcome::kHeldByAnother);
  moved.reset();
  EXPECT_EQ(FolderLock(dir.path(), ".lock").outcome(), FolderLock::Outcome::kLocked);
}

// The lock file is never reached through a link (it could lock, and write a pid into,
// any file the process may write).
TEST(FolderLock, RefusesALinkInPlaceOfItsFile) {
  ScratchDir dir("folder-lock");
  const std::string target = dir.Write("precious.txt", "keep me");
  fs::create_symlink(target, dir.path() + "/.lock");
  try {
    FolderLock lock(dir.path(), ".lock");
    ADD_FAILURE() << "locked through a link";
  } catch (const std::runtime_error& error) {
    EXPECT_TRUE(Contains(error.what(), "cannot open " + dir.path() + "/.lock")) << error.what();
  }
  EXPECT_EQ(ReadTextFile(target), "keep me");
}

}  // namespace
}  // namespace poplar
