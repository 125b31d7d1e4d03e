// Lists in messages and tables: "1 x A100-80GB, 2 x T4-16GB".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace poplar {

// The texts `name(item)` of `items`, in order, with `separator` between them; "" for none.
template <typename Items, typename Name>
std::string Join(const Items& items, std::string_view separator, Name&& name) {
  std::string text;
  bool first = true;
  for (const auto& item : items) {
    if (!first) text += separator;
    text += name(item);
    first = false;
  }
  return text;
}

// `items` are texts already.
template <typename Items>
std::string Join(const Items& items, std::string_view separator) {
  return Join(
      items, separator, [](const auto& item) -> const auto& { return item; });
}

// "1 rank", "3 ranks": `count` with `noun`, plural with an s.
inline std::string Count(std::int64_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

}  // namespace poplar
