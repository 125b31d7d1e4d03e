// Suggestions for misspelt names: flags, commands, keys of a file.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace poplar {

// Edits (insert, delete, replace one character) that turn `a` into `b`.
std::size_t EditDistance(const std::string& a, const std::string& b);

// The one of `known` nearest to `word` if it is at most two edits away (a near miss, not
// a guess), else "".
std::string NearestName(const std::string& word, const std::vector<std::string>& known);

// "; did you mean X?" for NearestName, or "" when nothing is near.
std::string DidYouMean(const std::string& word, const std::vector<std::string>& known);

// What follows "unknown key" for `key` in a file whose parser read `read` and looked for
// `asked` (keys it reads only when present) at that place: "; did you mean
// credentials?; known keys here: credentials, job, ..." (the JSON and YAML readers').
std::string UnknownKeyHint(const std::string& key, const std::set<std::string>& read,
                           const std::set<std::string>& asked);

}  // namespace poplar
