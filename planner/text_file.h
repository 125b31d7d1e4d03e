// Reading and writing whole text files, with the error policy of docs/architecture.md:
// failures are InputErrors naming the path; writes are atomic (temporary file in the
// same folder, then rename), so a reader never sees half a file.
#pragma once

#include <string>

namespace poplar {

std::string ReadTextFile(const std::string& path);
// Writes through a symbolic link (the link stays); refuses a path that is a folder, a
// device or a pipe, rather than replacing it.
void WriteFileAtomically(const std::string& path, const std::string& contents);
// A name that can be a file's name in a folder, as a device type names its profile
// <type>.json: not empty, no '/', not "." or "..".
bool IsPlainFileName(const std::string& name);
// Throws InputError naming `flag` unless the folder `path` would be written in exists,
// so that a mistyped output path fails before the work, not after it.
void RequireFolderFor(const std::string& path, const std::string& flag);
// The folder part of a path ("a/b/c.yaml" -> "a/b", "c.yaml" -> ".").
std::string ParentFolder(const std::string& path);
// `path` if absolute, else `base_folder`/`path`.
std::string ResolveAgainst(const std::string& base_folder, const std::string& path);

}  // namespace poplar
