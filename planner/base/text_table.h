// A plain-text table for terminal output: columns padded to their widest cell,
// numbers right-aligned, a header underlined with dashes.
#pragma once

#include <string>
#include <vector>

namespace poplar {

class TextTable {
 public:
  // `right_aligned[i]` says whether column i is numeric (right-aligned).
  TextTable(std::vector<std::string> header, std::vector<bool> right_aligned);
  void AddRow(std::vector<std::string> cells);
  // Each line starts with `indent`.
  std::string Render(const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_aligned_;
  std::vector<std::vector<std::string>> rows_;
};

// "%.*f" of `value`, with `digits` decimals.
std::string Fixed(double value, int digits);
// Seconds with a unit chosen for readability: "850 us", "12.3 ms", "1.234 s".
std::string Seconds(double seconds);
// Bytes with one decimal in GiB, or MiB below one GiB: "37.5 GiB", "48.0 MiB".
std::string GiB(double bytes);
// A micro-batch list with runs folded: [24,24,24,16] -> "24x3 16"; empty -> "-".
std::string MicroBatchList(const std::vector<int>& micro_batches);

}  // namespace poplar
