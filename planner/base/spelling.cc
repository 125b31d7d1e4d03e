#include "planner/base/spelling.h"

#include <algorithm>

#include "planner/base/join.h"

namespace poplar {

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string NearestName(const std::string& word, const std::vector<std::string>& known) {
  std::string nearest;
  std::size_t best = 3;
  for (const std::string& name : known) {
    const std::size_t distance = EditDistance(word, name);
    if (distance < best) {
      best = distance;
      nearest = name;
    }
  }
  return nearest;
}

std::string DidYouMean(const std::string& word, const std::vector<std::string>& known) {
  const std::string nearest = NearestName(word, known);
  return nearest.empty() ? "" : "; did you mean " + nearest + "?";
}

std::string UnknownKeyHint(const std::string& key, const std::set<std::string>& read,
                           const std::set<std::string>& asked) {
  std::set<std::string> known = read;
  known.insert(asked.begin(), asked.end());
  return DidYouMean(key, {known.begin(), known.end()}) + "; known keys here: " + Join(known, ", ");
}

}  // namespace poplar
