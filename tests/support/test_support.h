// Small helpers shared by the test suites (gmock is not linked into them).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace poplar::testing {

// Whether `text` contains every one of `parts`; the failure shows the text.
::testing::AssertionResult ContainsAll(const std::string& text, std::initializer_list<std::string> parts);
::testing::AssertionResult Contains(const std::string& text, const std::string& part);

// Errors are one line a user can act on: non-empty, ending in a newline, no other newline.
::testing::AssertionResult IsOneLine(const std::string& text);

// The message of the InputError (planner/base/input_error.h) `read` throws; empty when it
// throws none (any other exception goes on).
std::string ErrorOf(const std::function<void()>& read);

// The non-empty lines of a file (a metrics file's JSON records); none if it is missing.
std::vector<std::string> ReadLines(const std::string& path);

// A fresh folder under the test temporary directory, removed with everything in it
// when the ScratchDir goes away.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `text` to path()/name (making its folders) and returns that path.
  std::string Write(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

}  // namespace poplar::testing

namespace poplar::testing {

// Listens on every address at `port` while it lives, if the port is free (held());
// a test that needs a port taken holds it so.
class HeldPort {
 public:
  explicit HeldPort(int port);
  ~HeldPort();
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace poplar::testing
