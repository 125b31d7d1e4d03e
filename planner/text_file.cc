#include "planner/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "planner/input_error.h"

namespace poplar {

std::string ReadTextFile(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw InputError(path, "", "cannot read: is a folder, not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", std::string("cannot read: ") + std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw InputError(path, "", "read failed");
  return contents.str();
}

void WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", std::string("cannot write: ") + std::strerror(errno));
    out << contents;
    out.flush();
    if (!out) {
      std::remove(temporary.c_str());
      throw InputError(path, "", "write failed");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw InputError(path, "", "cannot replace: " + reason);
  }
}

std::string ParentFolder(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string ResolveAgainst(const std::string& base_folder, const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  return base_folder + "/" + path;
}

}  // namespace poplar
