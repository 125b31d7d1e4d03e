// Suggestions for misspelt names: flags, commands, keys of a file.
#pragma once

#include <string>
#include <vector>

namespace poplar {

// Edits (insert, delete, replace one character) that turn `a` into `b`.
std::size_t EditDistance(const std::string& a, const std::string& b);

// The one of `known` nearest to `word` if it is at most two edits away (a near miss, not
// a guess), else "".
std::string NearestName(const std::string& word, const std::vector<std::string>& known);

}  // namespace poplar
