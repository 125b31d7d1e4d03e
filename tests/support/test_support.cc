#include "test_support.h"

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "planner/base/input_error.h"

namespace poplar::testing {

std::string ErrorOf(const std::function<void()>& read) {
  try {
    read();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

::testing::AssertionResult ContainsAll(const std::string& text, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) {
    if (text.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  return ContainsAll(text, {part});
}

::testing::AssertionResult IsOneLine(const std::string& text) {
  if (text.empty() || text.back() != '\n' || text.find('\n') != text.size() - 1) {
    return ::testing::AssertionFailure() << "not exactly one line: '" << text << "'";
  }
  return ::testing::AssertionSuccess();
}

ScratchDir::ScratchDir(const std::string& prefix) {
  std::string pattern = ::testing::TempDir() + prefix + "_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string ScratchDir::Write(const std::string& name, const std::string& text) const {
  const std::string path = path_ + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
  return path;
}

}  // namespace poplar::testing

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace poplar::testing {

HeldPort::HeldPort(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (fd_ >= 0 && (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd_, 1) != 0)) {
    ::close(fd_);
    fd_ = -1;
  }
}

HeldPort::~HeldPort() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace poplar::testing
