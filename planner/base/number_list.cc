#include "planner/base/number_list.h"

#include <algorithm>

namespace poplar {

std::optional<std::vector<int>> ParseNumberList(const std::string& text, int most_in_range) {
  const auto number = [](const std::string& digits) -> std::optional<int> {
    if (digits.empty() || digits.size() > 7 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::stoi(digits);
  };
  std::vector<int> numbers;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const std::size_t dash = item.find('-');
    const auto first = number(item.substr(0, dash));
    const auto last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (!first || !last || *last < *first || *last - *first >= most_in_range) return std::nullopt;
    for (int n = *first; n <= *last; ++n) numbers.push_back(n);
    at = end + 1;
  }
  return numbers;
}

}  // namespace poplar
