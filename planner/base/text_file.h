// Reading and writing whole text files, with the error policy of docs/architecture.md:
// failures are InputErrors naming the path; writes are atomic (temporary file in the
// same folder, then rename), so a reader never sees half a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace poplar {

// The whole of `path` (a regular file, or a pipe read to its end); throws InputError
// naming it otherwise. Never waits for a writer to open a named pipe.
std::string ReadTextFile(const std::string& path);
// The bytes of `path`, opened and checked as ReadTextFile does, handed to `take` a piece
// (of at most 1 MiB) at a time instead of held whole; `start` comes first, with the
// file's size where it is a regular file (a pipe's is unknown). Exceptions from either
// pass through, the file closed.
void ReadFileInPieces(const std::string& path, const std::function<void(std::optional<std::uint64_t> size)>& start,
                      const std::function<void(std::string_view piece)>& take);
// Throws InputError naming `file` if `text` holds a NUL byte, which no JSON or YAML
// document does (a parser may stop there and take what came before for the whole).
void RequireNoNulByte(const std::string& text, const std::string& file);
// Throws InputError naming `path` when it exists but is not a regular file (a folder, a
// pipe, a device), without opening it: files poplar finds by name in a folder (profiles,
// checkpoints) are ones it wrote, never pipes. A missing path is left to the reader,
// which says so.
void RequireRegularFile(const std::string& path);
// Writes through a symbolic link (the link stays); refuses a path that is a folder, a
// device or a pipe, rather than replacing it. The contents are on the disk (fsync)
// before the name is, so that not even a power loss leaves the name on half a file.
void WriteFileAtomically(const std::string& path, std::string_view contents);
// The same with the contents written piece by piece, so that a large file (a model's
// weights) need not be held whole in memory: `write` is called once with an `append`
// that writes each piece to the temporary file in turn (a failed write is reported, as
// above, once `write` returns, and the pieces after it are skipped). An exception from
// `write` removes the temporary and propagates; the name is untouched.
using AppendBytes = std::function<void(std::string_view piece)>;
void WriteFileAtomically(const std::string& path, const std::function<void(const AppendBytes& append)>& write);
// The process that wrote `name`, when `name` is the temporary WriteFileAtomically makes
// for `file_name` in the same folder ("summary.json.tmp.4242" for summary.json: 4242;
// the file name cut to its first 240 bytes, so that every temporary name fits in 255);
// 0 for any other name. A writer that died before its rename left it behind.
long AtomicWriteTemporaryOwner(const std::string& name, const std::string& file_name);
// Whether the process `pid` no longer exists (kill(pid, 0) says ESRCH): its temporaries
// can go.
bool ProcessIsGone(long pid);
// The paths in `folder`, for the scans that tidy up (temporaries of dead writers, old
// checkpoints): as many as can be read, never an exception. A folder that cannot be
// opened gives none; one that fails, or is removed, while being read gives those read
// before (a range-for over directory_iterator would throw from its increment).
std::vector<std::filesystem::path> FolderEntries(const std::filesystem::path& folder);
// The descriptor of this process that `path` names (/dev/stdout: 1, /dev/stderr: 2,
// /dev/fd/N and /proc/self/fd/N: N), or -1 when it names a file. Writing through the
// descriptor keeps its offset: the lines join the process's other output.
int OwnDescriptorOf(const std::string& path);
// Flushes the file or folder `path` to the disk (fsync): a folder's flush makes the
// names made or renamed in it durable. Throws InputError naming `path`.
void SyncToDisk(const std::string& path);
// A name that can be a file's name in a folder, as a device type names its profile
// <type>.json: not empty, no '/', not "." or "..".
bool IsPlainFileName(const std::string& name);
// Throws InputError naming `flag` unless a file can be written at `path`: the folder it
// would be written in exists and takes new files, and `path` is not something a write
// refuses (a folder, a device, a pipe). So a mistyped or unwritable output path fails
// before the work, not after it.
void RequireFolderFor(const std::string& path, const std::string& flag);
// Throws InputError naming `flag` when `path` is longer than the system takes (PATH_MAX
// bytes in all, NAME_MAX in one name), which every file call would refuse with a
// filesystem error quoting the whole path. The Require* and MakeOutputFolder calls here
// check it first.
void RequirePathFits(const std::string& path, const std::string& flag);
// Throws InputError naming `flag` unless a file can be made in `folder` (one is made and
// removed: a read-only mount or /proc refuses what permissions would allow root).
void RequireWritableFolder(const std::string& folder, const std::string& flag);
// Whether `a` and `b` name the same file or folder: by any path or link when both exist,
// by their absolute, normalised paths otherwise (an output not yet written).
bool SamePath(const std::string& a, const std::string& b);
// Whether `path` is `folder` or lies inside it, by their absolute, normal forms (links
// in the part that exists resolved; a hard link from elsewhere is not seen).
bool IsWithin(const std::string& path, const std::string& folder);
// A file a command reads, and what it is to the user ("the cluster file", "job.model").
struct InputFile {
  std::string path;
  std::string what;
};
// Throws InputError naming `flag` if `output` is one of `inputs` (the same file by any
// path or link): a command's output must not replace what it reads. Also checks, as
// RequireFolderFor, that the output's folder exists.
void RequireOutputApart(const std::string& output, const std::vector<InputFile>& inputs, const std::string& flag);
// For an output written as a stream (opened, emptied or appended to, never replaced by
// a rename, as --metrics): refused if `output` is one of `inputs` or a folder; a device
// or a pipe is fine (/dev/stdout, a pipe to jq); a missing file needs its folder, as
// RequireFolderFor. Whether an existing file or a descriptor (OwnDescriptorOf) takes
// writes is the writer's to find out, when it opens it (launcher/worker/metrics_writer.h).
void RequireStreamOutputApart(const std::string& output, const std::vector<InputFile>& inputs, const std::string& flag);
// Creates the folder `path` (and its parents) to write into, or throws InputError naming
// `flag` when it cannot: a file is in the way, or no permission.
void MakeOutputFolder(const std::string& path, const std::string& flag);

// `text` without the blanks, tabs and line ends around it: the value of a one-line file
// (job_id, a checkpoint's latest, the token), written by hand or by echo.
std::string Trimmed(const std::string& text);

// Writes all of `data` to descriptor `fd`, retrying after EINTR and waiting on a
// non-blocking descriptor: "" once written, else the system's reason ("No space left on
// device").
std::string WriteAll(int fd, std::string_view data);

// The first line of a message: libtorch appends a C++ backtrace to its own, gRPC and
// Gloo their details.
std::string FirstLine(const std::string& text);

// The folder part of a path ("a/b/c.yaml" -> "a/b", "c.yaml" -> ".").
std::string ParentFolder(const std::string& path);
// `path` if absolute, else `base_folder`/`path`.
std::string ResolveAgainst(const std::string& base_folder, const std::string& path);

}  // namespace poplar
