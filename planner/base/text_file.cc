#include "planner/base/text_file.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "planner/base/input_error.h"

namespace poplar {

namespace {

// The file a write replaces: `path`, or the file its symbolic link names, so that the
// link stays a link. Anything that exists but is not a regular file (a folder, a device
// such as /dev/null, a pipe) is refused: renaming over it would replace it.
std::string WriteTarget(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);  // through links
  const bool link = fs::is_symlink(fs::symlink_status(path, error));
  if (!fs::exists(status)) {
    if (link) throw InputError(path, "", "cannot write: a symbolic link to nothing");
    return path;
  }
  if (fs::is_directory(status)) throw InputError(path, "", "cannot write: is a folder; name a file in it");
  if (!fs::is_regular_file(status)) {
    throw InputError(path, "", "cannot write: not a regular file (a device or a pipe); name a file");
  }
  return link ? fs::canonical(path, error).string() : path;
}

// "<file_name>.tmp.": the start of the temporary names of `file_name`, the name cut to
// 240 bytes so that a pid of up to 10 digits keeps the whole within a name's 255 bytes.
std::string TemporaryPrefix(const std::string& file_name) { return file_name.substr(0, 240) + ".tmp."; }

}  // namespace

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string Trimmed(const std::string& text) {
  constexpr const char* kBlank = " \t\r\n";
  const auto first = text.find_first_not_of(kBlank);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(kBlank) - first + 1);
}

void ReadFileInPieces(const std::string& path, const std::function<void(std::optional<std::uint64_t> size)>& start,
                      const std::function<void(std::string_view piece)>& take) {
  // Opened without waiting: a named pipe no program writes to would block open() for
  // ever (no --timeout reaches it). A pipe is then read to its end, as process
  // substitution (<(...)) gives one; one with no writer ends at once, empty.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(path, "", std::string("cannot read: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw InputError(path, "", std::string("cannot read: ") + std::strerror(errno));
  if (S_ISDIR(status.st_mode)) throw InputError(path, "", "cannot read: is a folder, not a file");
  // A device such as /dev/zero never ends.
  if (!S_ISREG(status.st_mode) && !S_ISFIFO(status.st_mode)) {
    throw InputError(path, "", "cannot read: not a regular file (a device or a socket)");
  }
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    throw InputError(path, "", std::string("cannot read: ") + std::strerror(errno));
  }
  start(S_ISREG(status.st_mode) ? std::optional<std::uint64_t>(status.st_size) : std::nullopt);
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got == 0) break;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(path, "", std::string("read failed: ") + std::strerror(errno));
    take(std::string_view(buffer.data(), static_cast<std::size_t>(got)));
  }
}

std::string ReadTextFile(const std::string& path) {
  std::string contents;
  ReadFileInPieces(
      path, [&](std::optional<std::uint64_t> size) { contents.reserve(static_cast<std::size_t>(size.value_or(0))); },
      [&](std::string_view piece) { contents.append(piece); });
  return contents;
}

void RequireNoNulByte(const std::string& text, const std::string& file) {
  if (const auto at = text.find('\0'); at != std::string::npos) {
    throw InputError(file, "", "holds a NUL byte (at byte " + std::to_string(at) + "): not a text file");
  }
}

void RequireRegularFile(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw InputError(path, "", "is not a regular file (a folder, a pipe or a device)");
  }
}

void SyncToDisk(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, "", std::string("cannot open to flush to disk: ") + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!synced) throw InputError(path, "", std::string("cannot flush to disk: ") + std::strerror(error));
}

std::string WriteAll(int fd, std::string_view data) {
  for (std::size_t done = 0; done < data.size();) {
    const ssize_t written = ::write(fd, data.data() + done, data.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A descriptor shared with a parent that made it non-blocking: wait until it
      // takes more, as a blocking one would.
      pollfd ready{fd, POLLOUT, 0};
      ::poll(&ready, 1, -1);
      continue;
    }
    if (written <= 0) return written < 0 ? std::strerror(errno) : "nothing was written";
    done += static_cast<std::size_t>(written);
  }
  return "";
}

void WriteFileAtomically(const std::string& path, std::string_view contents) {
  WriteFileAtomically(path, [contents](const AppendBytes& append) { append(contents); });
}

void WriteFileAtomically(const std::string& named, const std::function<void(const AppendBytes& append)>& write) {
  const std::string path = WriteTarget(named);
  const std::filesystem::path target(path);
  const std::string temporary =
      (target.parent_path() / (TemporaryPrefix(target.filename().string()) + std::to_string(::getpid()))).string();
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw InputError(path, "", std::string("cannot write: ") + std::strerror(errno));
  // The system's reason stays with the failure: "No space left on device", "File too large".
  std::string failure;
  try {
    write([&](std::string_view piece) {
      if (failure.empty()) failure = WriteAll(fd, piece);
    });
  } catch (...) {
    ::close(fd);
    std::remove(temporary.c_str());
    throw;
  }
  if (!failure.empty()) {
    failure = "write failed: " + failure;
  } else if (::fsync(fd) != 0) {
    failure = std::string("cannot flush to disk: ") + std::strerror(errno);
  }
  if (::close(fd) != 0 && failure.empty()) failure = std::string("write failed: ") + std::strerror(errno);
  if (!failure.empty()) {
    std::remove(temporary.c_str());
    throw InputError(path, "", failure);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw InputError(path, "", "cannot replace: " + reason);
  }
}

long AtomicWriteTemporaryOwner(const std::string& name, const std::string& file_name) {
  const std::string prefix = TemporaryPrefix(file_name);  // as WriteFileAtomically names it
  const bool digits = name.size() > prefix.size() && name.size() <= prefix.size() + 9 &&
                      name.compare(0, prefix.size(), prefix) == 0 &&
                      name.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
  return digits ? std::stol(name.substr(prefix.size())) : 0;
}

bool ProcessIsGone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

std::vector<std::filesystem::path> FolderEntries(const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  std::vector<fs::path> entries;
  std::error_code error;
  for (fs::directory_iterator entry(folder, error), end; !error && entry != end; entry.increment(error)) {
    entries.push_back(entry->path());
  }
  return entries;
}

int OwnDescriptorOf(const std::string& path) {
  if (path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.size() > prefix.size() && path.size() - prefix.size() <= 9 &&
        path.compare(0, prefix.size(), prefix) == 0 &&
        path.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
      return std::stoi(path.substr(prefix.size()));
    }
  }
  return -1;
}

void RequirePathFits(const std::string& path, const std::string& flag) {
  std::string longest;
  for (const auto& name : std::filesystem::path(path)) {
    if (name.string().size() > longest.size()) longest = name.string();
  }
  if (path.size() < PATH_MAX && longest.size() <= NAME_MAX) return;
  throw InputError(
      flag, "",
      "'" + Printable(path) + "' is too long: a path has at most " + std::to_string(PATH_MAX - 1) +
          " bytes and each of its names " + std::to_string(NAME_MAX) +
          (path.size() >= PATH_MAX ? ""
                                   : " ('" + Printable(longest) + "' has " + std::to_string(longest.size()) + ")"));
}

void RequireFolderFor(const std::string& path, const std::string& flag) {
  RequirePathFits(path, flag);
  // What the write would refuse (a folder, a device, a dangling link), refused now.
  std::string target;
  try {
    target = WriteTarget(path);
  } catch (const InputError& error) {
    throw InputError(flag, "", error.what());
  }
  const std::filesystem::path folder = std::filesystem::path(target).parent_path();
  std::error_code error;
  if (!folder.empty() && !std::filesystem::is_directory(folder, error)) {
    // `-o plan.json/` or `-o plan.json/x/p.json` names a folder under plan.json, a file.
    for (std::filesystem::path up = folder; !up.empty() && up != up.parent_path(); up = up.parent_path()) {
      if (std::filesystem::exists(up, error) && !std::filesystem::is_directory(up, error)) {
        throw InputError(flag, "", up.string() + " is not a folder, so " + path + " cannot be written");
      }
    }
    throw InputError(flag, "", "folder " + folder.string() + " does not exist");
  }
  RequireWritableFolder(folder.empty() ? "." : folder.string(), flag);
}

void RequireWritableFolder(const std::string& folder, const std::string& flag) {
  RequirePathFits(folder, flag);
  // Permissions alone do not say it (root ignores them; a read-only mount, /proc): a
  // file is made and removed again.
  const std::string probe = folder + "/.poplar-write-check." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST) {
    // /proc answers "No such file or directory" of a folder that is there.
    std::error_code error;
    const std::string reason = errno == ENOENT && std::filesystem::is_directory(folder, error)
                                   ? "its file system takes no new files"
                                   : std::strerror(errno);
    throw InputError(flag, "", "cannot write in folder " + folder + ": " + reason);
  }
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

// Absolute, with the links of the part that exists resolved; "folder/" as "folder".
std::filesystem::path NormalPath(const std::string& path) {
  std::error_code error;
  std::filesystem::path full = std::filesystem::weakly_canonical(std::filesystem::absolute(path), error);
  // A path the system refuses (one too long) is compared as written, not as nothing.
  if (error) full = std::filesystem::absolute(path).lexically_normal();
  if (full.filename().empty()) full = full.parent_path();
  return full;
}

}  // namespace

bool SamePath(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::exists(a, error) && std::filesystem::exists(b, error)) {
    return std::filesystem::equivalent(a, b, error);
  }
  return NormalPath(a) == NormalPath(b);
}

bool IsWithin(const std::string& path, const std::string& folder) {
  const std::filesystem::path inner = NormalPath(path), outer = NormalPath(folder);
  return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
}

namespace {

void RequireNotAnInput(const std::string& output, const std::vector<InputFile>& inputs, const std::string& flag) {
  for (const InputFile& input : inputs) {
    if (!input.path.empty() && SamePath(output, input.path)) {
      throw InputError(flag, "",
                       output + " is " + input.what + (input.path == output ? "" : " (" + input.path + ")") +
                           ", which this command reads; writing there would destroy it");
    }
  }
}

}  // namespace

void RequireOutputApart(const std::string& output, const std::vector<InputFile>& inputs, const std::string& flag) {
  RequireFolderFor(output, flag);
  RequireNotAnInput(output, inputs, flag);
}

void RequireStreamOutputApart(const std::string& output, const std::vector<InputFile>& inputs,
                              const std::string& flag) {
  RequirePathFits(output, flag);
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(output, error);  // through links
  if (OwnDescriptorOf(output) >= 0) {
    // A descriptor: the writer finds out whether it is open for writing.
  } else if (!std::filesystem::exists(status)) {
    RequireFolderFor(output, flag);  // and a dangling link is refused there
  } else if (std::filesystem::is_directory(status)) {
    throw InputError(flag, "", output + ": cannot write: is a folder; name a file in it");
  }
  // An existing file is not opened here: the writer opens it for real (opening a pipe
  // and closing it again would end its reader's input).
  RequireNotAnInput(output, inputs, flag);
}

void MakeOutputFolder(const std::string& path, const std::string& flag) {
  RequirePathFits(path, flag);
  std::error_code error, ignored;
  std::filesystem::create_directories(path, error);
  if (error || !std::filesystem::is_directory(path, ignored)) {
    const bool file_in_way = std::filesystem::exists(path, ignored) && !std::filesystem::is_directory(path, ignored);
    throw InputError(
        flag, "", "cannot make the folder " + path + ": " + (file_in_way ? "a file is in the way" : error.message()));
  }
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
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
