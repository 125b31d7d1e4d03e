#include "planner/base/text_table.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace poplar {

TextTable::TextTable(std::vector<std::string> header, std::vector<bool> right_aligned)
    : header_(std::move(header)), right_aligned_(std::move(right_aligned)) {
  if (header_.size() != right_aligned_.size()) throw std::logic_error("TextTable: column mismatch");
}

void TextTable::AddRow(std::vector<std::string> cells) {
  if (cells.size() != header_.size()) throw std::logic_error("TextTable: row width");
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render(const std::string& indent) const {
  std::vector<std::size_t> widths(header_.size());
  for (std::size_t i = 0; i < header_.size(); ++i) {
    widths[i] = header_[i].size();
    for (const auto& row : rows_) widths[i] = std::max(widths[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text = indent;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(widths[i] - cells[i].size(), ' ');
      text += right_aligned_[i] ? pad + cells[i] : cells[i] + pad;
      if (i + 1 < cells.size()) text += "  ";
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text + "\n";
  };
  std::string out = line(header_);
  std::vector<std::string> rule;
  for (std::size_t width : widths) rule.push_back(std::string(width, '-'));
  out += line(rule);
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string Fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string Seconds(double seconds) {
  if (seconds < 1e-3) return Fixed(seconds * 1e6, 0) + " us";
  if (seconds < 1.0) return Fixed(seconds * 1e3, 1) + " ms";
  return Fixed(seconds, 3) + " s";
}

std::string GiB(double bytes) {
  if (bytes < 1024.0 * 1024.0 * 1024.0) return Fixed(bytes / (1024.0 * 1024.0), 1) + " MiB";
  return Fixed(bytes / (1024.0 * 1024.0 * 1024.0), 1) + " GiB";
}

std::string MicroBatchList(const std::vector<int>& micro_batches) {
  if (micro_batches.empty()) return "-";
  std::string text;
  for (std::size_t i = 0; i < micro_batches.size();) {
    std::size_t run = 1;
    while (i + run < micro_batches.size() && micro_batches[i + run] == micro_batches[i]) ++run;
    if (!text.empty()) text += " ";
    text += std::to_string(micro_batches[i]);
    if (run > 1) text += "x" + std::to_string(run);
    i += run;
  }
  return text;
}

}  // namespace poplar
