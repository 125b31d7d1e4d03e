#include "planner/base/text_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::ScratchDir;

TEST(WriteFileAtomically, WritesThroughASymbolicLinkAndKeepsTheLink) {
  ScratchDir dir("text-file");
  const std::string target = dir.Write("target.json", "old");
  const std::string link = dir.path() + "/link.json";
  fs::create_symlink(target, link);
  WriteFileAtomically(link, "new");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(ReadTextFile(target), "new");
}

TEST(WriteFileAtomically, WritesPieceByPieceAndAFailingWriterLeavesTheOldFile) {
  ScratchDir dir("text-file");
  const std::string path = dir.Write("weights.bin", "old");
  WriteFileAtomically(path, [](const AppendBytes& append) {
    append("he");
    append(std::string_view("llo\0!", 5));  // bytes, not text: the NUL is kept
  });
  EXPECT_EQ(ReadTextFile(path), std::string("hello\0!", 7));
  EXPECT_THROW(WriteFileAtomically(path,
                                   [](const AppendBytes& append) {
                                     append("half");
                                     throw std::runtime_error("the next piece could not be made");
                                   }),
               std::runtime_error);
  EXPECT_EQ(ReadTextFile(path), std::string("hello\0!", 7)) << "the name keeps the whole old file";
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1)
      << "no temporary file is left";
}

TEST(WriteFileAtomically, RefusesWhatIsNotARegularFileAndLeavesItAlone) {
  ScratchDir dir("text-file");
  const std::string fifo = dir.path() + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    WriteFileAtomically(fifo, "text");
    ADD_FAILURE() << "a pipe was written over";
  } catch (const InputError& error) {
    EXPECT_TRUE(Contains(error.what(), "not a regular file")) << error.what();
  }
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the pipe is still a pipe";
  fs::create_directory(dir.path() + "/folder");
  EXPECT_THROW(WriteFileAtomically(dir.path() + "/folder", "text"), InputError);
  EXPECT_TRUE(fs::is_directory(dir.path() + "/folder"));
  fs::create_symlink(dir.path() + "/missing", dir.path() + "/dangling");
  EXPECT_THROW(WriteFileAtomically(dir.path() + "/dangling", "text"), InputError);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 3)
      << "no temporary file is left";
}

// A name of up to 255 bytes, the most a name may have, is written: its temporary name
// ("<name cut to 240 bytes>.tmp.<pid>") fits too, and is known as its temporary.
TEST(WriteFileAtomically, WritesNamesOfUpTo255BytesThroughATemporaryThatFits) {
  ScratchDir dir("text-file");
  for (const std::size_t length : {std::size_t{200}, std::size_t{247}, std::size_t{255}}) {
    const std::string name(length, 'n');
    WriteFileAtomically(dir.path() + "/" + name, "text");
    EXPECT_EQ(ReadTextFile(dir.path() + "/" + name), "text");
  }
  EXPECT_EQ(AtomicWriteTemporaryOwner(std::string(240, 'n') + ".tmp.4242", std::string(255, 'n')), 4242);
  EXPECT_EQ(AtomicWriteTemporaryOwner("summary.json.tmp.4242", "summary.json"), 4242);
  EXPECT_EQ(AtomicWriteTemporaryOwner("summary.json.tmp.x", "summary.json"), 0);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 3)
      << "no temporary file is left";
}

TEST(RequirePathFits, NamesTheFlagOfAPathOrNameTooLong) {
  EXPECT_NO_THROW(RequirePathFits("/tmp/" + std::string(255, 'n'), "--save"));
  for (const std::string& path : {"/tmp/" + std::string(256, 'n'), std::string(4096, 'p')}) {
    try {
      RequirePathFits(path, "--save");
      ADD_FAILURE() << "a path of " << path.size() << " bytes passed";
    } catch (const InputError& error) {
      EXPECT_EQ(error.file(), "--save");
      EXPECT_TRUE(Contains(error.what(), "is too long: a path has at most 4095 bytes and each of its names 255"))
          << error.what();
    }
  }
}

// --metrics is appended to, never replaced: a device or a pipe is a fine target
// (/dev/stdout, `>(jq ...)`), unlike for a replaced output. A read-only file (checked
// before the work, not after the rendezvous), a folder, a missing folder or an input are
// not.
TEST(RequireStreamOutputApart, TakesDevicesAndPipesButNotFoldersOrInputs) {
  ScratchDir dir("text-file");
  const std::string fifo = dir.path() + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NO_THROW(RequireStreamOutputApart("/dev/null", {}, "--metrics"));
  EXPECT_NO_THROW(RequireStreamOutputApart(fifo, {}, "--metrics")) << "a pipe with no reader yet";
  EXPECT_NO_THROW(RequireStreamOutputApart(dir.path() + "/new.jsonl", {}, "--metrics"));
  EXPECT_FALSE(fs::exists(dir.path() + "/new.jsonl")) << "the check makes nothing";
  const std::string kept = dir.Write("kept.jsonl", "{}\n");
  EXPECT_NO_THROW(RequireStreamOutputApart(kept, {}, "--metrics"));
  EXPECT_EQ(ReadTextFile(kept), "{}\n") << "the check truncates nothing";
  auto refusal = [](const std::string& path, const std::vector<InputFile>& inputs) -> std::string {
    try {
      RequireStreamOutputApart(path, inputs, "--metrics");
    } catch (const InputError& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_TRUE(Contains(refusal(dir.path(), {}), "is a folder")) << refusal(dir.path(), {});
  EXPECT_TRUE(Contains(refusal(dir.path() + "/missing/m.jsonl", {}), "does not exist"));
  // A file named as a folder (`-o plan.json/`) is said to be one, not to be missing.
  for (const std::string& path : {kept + "/", kept + "/m.jsonl", kept + "/x/m.jsonl"}) {
    EXPECT_TRUE(Contains(refusal(path, {}), kept + " is not a folder")) << refusal(path, {});
  }
  const std::string input = refusal(kept, {{kept, "the plan (--plan)"}});
  EXPECT_TRUE(Contains(input, "is the plan (--plan)")) << input;
  EXPECT_TRUE(Contains(input, "--metrics")) << input;
}

TEST(ReadTextFile, RefusesDevices) {
  // /dev/null would read as empty, /dev/zero forever: neither is a file of poplar's.
  try {
    ReadTextFile("/dev/null");
    ADD_FAILURE() << "a device was read";
  } catch (const InputError& error) {
    EXPECT_TRUE(Contains(error.what(), "/dev/null")) << error.what();
    EXPECT_TRUE(Contains(error.what(), "not a regular file")) << error.what();
  }
}

// A named pipe that no program writes to reads as empty, at once: open() does not wait
// for a writer for ever, beyond any --timeout. (A pipe with a writer, as <(...) gives,
// is read to its end: poplar plan <(cat cluster.yaml) works.)
TEST(ReadTextFile, ANamedPipeWithoutAWriterReadsAsEmptyAtOnce) {
  ScratchDir scratch("poplar_text_file");
  const std::string fifo = scratch.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto read = std::async(std::launch::async, [&] { return ReadTextFile(fifo); });
  if (read.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "ReadTextFile waited for a writer";
    ::close(::open(fifo.c_str(), O_WRONLY));  // be the writer, so that the test ends
  }
  EXPECT_EQ(read.get(), "");
}

TEST(FolderEntries, ListsFilesAndFoldersAndNeverThrows) {
  ScratchDir dir("text-file");
  WriteFileAtomically(dir.path() + "/a.json", "{}");
  fs::create_directory(dir.path() + "/step-00000001");
  std::vector<fs::path> entries = FolderEntries(dir.path());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<fs::path>{dir.path() + "/a.json", dir.path() + "/step-00000001"}));
  // What cannot be listed lists nothing: a folder that is gone, a file.
  EXPECT_TRUE(FolderEntries(dir.path() + "/gone").empty());
  EXPECT_TRUE(FolderEntries(dir.path() + "/a.json").empty());
}

TEST(Trimmed, DropsTheBlanksAndLineEndsAroundTheValueOnly) {
  EXPECT_EQ(Trimmed("step-00000012\n"), "step-00000012");
  EXPECT_EQ(Trimmed(" \t job a\tb \r\n\n"), "job a\tb");
  EXPECT_EQ(Trimmed(" \r\n"), "");
  EXPECT_EQ(Trimmed(""), "");
}

}  // namespace
}  // namespace poplar
