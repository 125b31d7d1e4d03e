// A run's line of training (planner/formats/checkpoint_line.h): which checkpoints it holds
// across resumes, and the meta.json keys that record it, read strictly.
#include "planner/formats/checkpoint_line.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

CheckpointLine ReadBack(const nlohmann::json& meta) {
  JsonFields fields(meta, "meta.json", "");
  CheckpointLine line = ReadLineKeys(fields);
  fields.Finish();
  return line;
}

// The message of the InputError reading `meta` throws; empty when it throws none.
std::string ReadError(const nlohmann::json& meta) {
  return testing::ErrorOf([&] { ReadBack(meta); });
}

// Run A to step 8; B on from A's 4; C on from B's 7.
TEST(CheckpointLine, HoldsEachRunsCheckpointsUpToWhereTheNextWentOn) {
  const CheckpointLine a{0xa, {}};
  const CheckpointLine c = a.ContinuedBy(0xb, 4).ContinuedBy(0xc, 7);
  EXPECT_EQ(c.run, 0xcu);
  EXPECT_EQ(c.ancestors, (std::vector<LineAncestor>{{0xa, 4}, {0xb, 7}}));
  EXPECT_TRUE(c.Holds(0xa, 2));
  EXPECT_TRUE(c.Holds(0xa, 4));
  EXPECT_FALSE(c.Holds(0xa, 6)) << "A's after B went on from its 4";
  EXPECT_TRUE(c.Holds(0xb, 7));
  EXPECT_FALSE(c.Holds(0xb, 10)) << "B's after C went on from its 7";
  EXPECT_TRUE(c.Holds(0xc, 8));
  EXPECT_FALSE(c.Holds(0xd, 1)) << "another run's";
  EXPECT_FALSE(c.Holds(0, 1)) << "one that records no run, on a line that does not go through one";
  EXPECT_TRUE(a.Holds(0xa, 100));

  // A line that went on from a checkpoint recording no run: such up to that step count.
  const CheckpointLine from_old = CheckpointLine{}.ContinuedBy(0xe, 5);
  EXPECT_TRUE(from_old.Holds(0, 5));
  EXPECT_FALSE(from_old.Holds(0, 6));
  EXPECT_TRUE(from_old.Holds(0xe, 6));
}

TEST(CheckpointLine, ReadsBackWhatItWrote) {
  const CheckpointLine line = CheckpointLine{0xfedcba9876543210ull, {}}.ContinuedBy(0x1, 4).ContinuedBy(0x2, 9);
  nlohmann::ordered_json meta;
  AddLineKeys(line, meta);
  EXPECT_EQ(meta["run"], "0000000000000002");
  EXPECT_EQ(
      nlohmann::json(meta["line"]),
      nlohmann::json::parse(R"([{"run": "fedcba9876543210", "step": 4}, {"run": "0000000000000001", "step": 9}])"));
  const CheckpointLine read = ReadBack(nlohmann::json(meta));
  EXPECT_EQ(read.run, line.run);
  EXPECT_EQ(read.ancestors, line.ancestors);

  // Run 0 records nothing, and nothing reads back as run 0 with no ancestors.
  nlohmann::ordered_json none;
  AddLineKeys(CheckpointLine{}, none);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(ReadBack(nlohmann::json::object()).run, 0u);
}

TEST(CheckpointLine, IsReadStrictly) {
  const auto parsed = [](const char* text) { return nlohmann::json::parse(text); };
  EXPECT_NE(ReadError(parsed(R"({"run": "00000000000000ab"})")).find("meta.json: line: is required"), std::string::npos)
      << ReadError(parsed(R"({"run": "00000000000000ab"})"));
  const std::string upper = ReadError(parsed(R"({"run": "00000000000000AB", "line": []})"));
  EXPECT_NE(upper.find("run: must be 16 hexadecimal digits (lower case), got '00000000000000AB'"), std::string::npos)
      << upper;
  const std::string zero = ReadError(parsed(R"({"run": "0000000000000000", "line": []})"));
  EXPECT_NE(zero.find("run: must not be 0"), std::string::npos) << zero;
  const std::string not_list = ReadError(parsed(R"({"run": "00000000000000ab", "line": {}})"));
  EXPECT_NE(not_list.find("line: must be a list of {run, step}"), std::string::npos) << not_list;
  const std::string backwards =
      ReadError(parsed(R"({"run": "00000000000000ab", "line": [{"run": "0000000000000001", "step": 7},
                                                      {"run": "0000000000000002", "step": 4}]})"));
  EXPECT_NE(backwards.find("line[1].step: must be at least the step before it in the line (7)"), std::string::npos)
      << backwards;
  const std::string unknown =
      ReadError(parsed(R"({"run": "00000000000000ab", "line": [{"run": "0000000000000001", "step": 7, "at": 1}]})"));
  EXPECT_NE(unknown.find("line[0].at: unknown key"), std::string::npos) << unknown;
  const std::string loop = ReadError(parsed(R"({"run": "00000000000000ab", "line": [{"run": "00000000000000ab",
                                                                                      "step": 7}]})"));
  EXPECT_NE(loop.find("line[0].run: is in the line twice (or is the checkpoint's own run)"), std::string::npos) << loop;
  const std::string twice =
      ReadError(parsed(R"({"run": "00000000000000ab", "line": [{"run": "0000000000000001", "step": 4},
                                                      {"run": "0000000000000001", "step": 7}]})"));
  EXPECT_NE(twice.find("line[1].run: is in the line twice"), std::string::npos) << twice;
  // Checkpoints that recorded no run may stand in a line more than once.
  EXPECT_EQ(ReadError(parsed(R"({"run": "00000000000000ab", "line": [{"run": "0000000000000000", "step": 4},
                                                                      {"run": "0000000000000000", "step": 7}]})")),
            "");
}

TEST(CheckpointLine, RunIdsAreNeverZeroAndDiffer) {
  std::set<std::uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    const std::uint64_t id = NewRunId();
    EXPECT_NE(id, 0u);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
}

}  // namespace
}  // namespace poplar
