// JsonFields and YamlFields, the readers under every file poplar reads: an error names
// the whole key path and says what was wrong with the value, in the user's terms.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "planner/base/input_error.h"
#include "planner/base/json_fields.h"
#include "planner/base/yaml_fields.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;
using testing::ErrorOf;

// A key given twice is named with the path to it, not alone ("params" alone says
// nothing of which object holds it).
TEST(ParseJsonObject, NamesARepeatedKeyByItsWholePath) {
  EXPECT_TRUE(Contains(ErrorOf([] { ParseJsonObject(R"({"a": 1, "a": 2})", "f.json"); }),
                       "f.json: a: is given more than once in one object"));
  EXPECT_TRUE(Contains(ErrorOf([] { ParseJsonObject(R"({"model": {"params": 1, "params": 2}})", "f.json"); }),
                       "f.json: model.params: is given more than once"));
  EXPECT_TRUE(Contains(ErrorOf([] {
                         ParseJsonObject(R"({"ranks": [{"rank": 0}, [1, {"x": 1}], {"rank": 1, "m": [], "rank": 2}]})",
                                         "f.json");
                       }),
                       "f.json: ranks[2].rank: is given more than once"));
  // The same key in sibling objects is no repeat.
  EXPECT_EQ(ErrorOf([] { ParseJsonObject(R"({"ranks": [{"rank": 0}, {"rank": 1}], "rank": 2})", "f.json"); }), "");
}

// A file that is not JSON text (UTF-16, binary) is refused without its bytes reaching
// the terminal: what the parser quotes is escaped.
TEST(ParseJsonObject, QuotesNoRawBytes) {
  const std::string error = ErrorOf([] { ParseJsonObject(std::string("\xff\xfe{\"", 4), "f.json"); });
  EXPECT_TRUE(Contains(error, "f.json: not valid JSON")) << error;
  EXPECT_TRUE(Contains(error, "\\xff")) << error;
  for (const unsigned char c : error) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int{c} << " in " << error;
}

// A key or value beyond ASCII (U+0085 and U+2028 break lines for readers that honour
// Unicode's breaks; bytes that are not UTF-8) is quoted escaped: one line of ASCII.
TEST(InputError, EscapesBytesBeyondAscii) {
  const std::string error =
      ErrorOf([] { ParseJsonObject("{\"na\xc2\x85me\": 1, \"na\xc2\x85me\": \"\xc3\xa9\"}", "f.json"); });
  const std::string unknown = [] {
    try {
      const nlohmann::json node = nlohmann::json::parse("{\"st\xc2\x85ge\": 1}");
      JsonFields fields(node, "f.json", "");
      fields.Finish();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_TRUE(Contains(error, "f.json: na\\xc2\\x85me: is given more than once")) << error;
  EXPECT_TRUE(Contains(unknown, "f.json: st\\xc2\\x85ge: unknown key")) << unknown;
  for (const std::string& text : {error, unknown, std::string(InputError("p\xe2\x80\xa8.yaml", "k", "\xff").what())}) {
    for (const unsigned char c : text) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << int{c} << " in " << text;
  }
}

// A NUL byte is no JSON's or YAML's (a UTF-16 file has one in every other byte), and
// `{...}\0garbage` is not read as its first part.
TEST(ParseJsonObject, ANulByteIsRefusedWhereverItIs) {
  const std::string utf16 = ErrorOf([] { ParseJsonObject(std::string("\xff\xfe{\0\"\0", 5), "f.json"); });
  EXPECT_EQ(utf16, "f.json: holds a NUL byte (at byte 3): not a text file");
  const std::string trailing = ErrorOf([] { ParseJsonObject(std::string("{\"a\": 1}\0garbage", 16), "f.json"); });
  EXPECT_EQ(trailing, "f.json: holds a NUL byte (at byte 8): not a text file");
  EXPECT_EQ(ErrorOf([] { ParseYamlDocument(std::string("a: 1\n\0b: 2\n", 12), "c.yaml"); }),
            "c.yaml: holds a NUL byte (at byte 5): not a text file");
}

// A ',' outside any [] or {} makes yaml-cpp's LoadAll yield empty documents forever
// (found by tests/fuzz/cluster_yaml_fuzzer): refused at once, with its line.
TEST(ParseYamlDocument, AStrayCommaIsRefusedNotParsedForever) {
  for (const std::string text : {" ,a: 6", ",", "job:\n  steps: 60\n ,eval_samples: 64\n"}) {
    SCOPED_TRACE(text);
    const std::string error = ErrorOf([&] { ParseYamlDocument(text, "c.yaml"); });
    EXPECT_TRUE(Contains(error, "c.yaml: not valid YAML")) << error;
  }
  EXPECT_TRUE(Contains(ErrorOf([] { ParseYamlDocument(" ,a: 6", "c.yaml"); }),
                       "nothing can be read from column 2 on (line 1)"));
}

TEST(JsonFields, AnIntegerBeyondSixtyFourBitsIsSaidToBeTooLarge) {
  const nlohmann::json node =
      ParseJsonObject(R"({"big": 100000000000000000000, "unsigned": 18446744073709551615, "half": 2.5})", "f.json");
  JsonFields fields(node, "f.json", "job");
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("big"); }), "f.json: job.big: is too large for an integer"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("unsigned"); }), "job.unsigned: is too large for an integer"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("half"); }), "job.half: must be an integer, got '2.5'"));
}

TEST(JsonFields, IntegerInSaysTheRangeAndTheValue) {
  const nlohmann::json node = ParseJsonObject(R"({"micro_batch": 2000000, "stage": 2})", "f.json");
  JsonFields fields(node, "f.json", "points[0]");
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.IntegerIn("micro_batch", 1, 1'000'000, "a number of samples"); }),
                       "f.json: points[0].micro_batch: must be a number of samples from 1 to 1000000, got 2000000"));
  EXPECT_EQ(fields.IntegerIn("stage", 0, 3, "a ZeRO stage"), 2);
}

TEST(YamlFields, AnIntegerBeyondSixtyFourBitsIsSaidToBeTooLargeAndARangeIsSaid) {
  const YAML::Node node = ParseYamlDocument("big: 99999999999999999999\nword: 12a\ncount: 0\n", "c.yaml");
  YamlFields fields(node, "c.yaml", "");
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("big"); }), "c.yaml: big: is too large for an integer"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("word"); }), "c.yaml: word: must be an integer, got '12a'"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.IntegerIn("count", 1, 8, "a number of devices"); }),
                       "c.yaml: count: must be a number of devices from 1 to 8, got 0 (line 3)"));
}

// A required key given but misspelt is named with the error ("is required" alone sent
// users looking for a key they had written).
TEST(Fields, ARequiredKeyThatIsMissingNamesAMisspeltOne) {
  const YAML::Node yaml = ParseYamlDocument("training:\n  global_bach: 128\n", "c.yaml");
  YamlFields training(yaml["training"], "c.yaml", "training");
  EXPECT_TRUE(
      Contains(ErrorOf([&] { training.Integer("global_batch"); }),
               "c.yaml: training.global_batch: is required (line 2); found 'global_bach' (line 2): a misspelling?"));
  const nlohmann::json json = ParseJsonObject(R"({"micro_bach": 4, "other": 1})", "p.json");
  JsonFields point(json, "p.json", "points[0]");
  EXPECT_TRUE(Contains(ErrorOf([&] { point.Integer("micro_batch"); }),
                       "p.json: points[0].micro_batch: is required; found 'micro_bach': a misspelling?"));
  EXPECT_FALSE(Contains(ErrorOf([&] { point.Integer("compute_s"); }), "misspelling"));
}

// A key given as null is there, and is said to be null, not missing and misspelt, in a
// plan that has both `stage` and `stages`.
TEST(JsonFields, ARequiredKeyGivenAsNullIsSaidToBeNull) {
  const nlohmann::json json = ParseJsonObject(R"({"stage": null, "stages": []})", "plan.json");
  JsonFields plan(json, "plan.json", "");
  EXPECT_EQ(ErrorOf([&] { plan.Integer("stage"); }), "plan.json: stage: is null; it needs a value");
}

// yaml-cpp reads a leading zero as octal (0127 as 87) and 0x80 as hex; poplar does not.
TEST(YamlFields, IntegersAreDecimal) {
  const YAML::Node node = ParseYamlDocument("octal: 0127\nhex: 0x80\nzero: 0\nsigned: -12\nplus: +3\n", "c.yaml");
  YamlFields fields(node, "c.yaml", "training");
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("octal"); }),
                       "c.yaml: training.octal: must be written without leading zeros, got '0127'"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("hex"); }), "training.hex: must be an integer, got '0x80'"));
  EXPECT_EQ(fields.Integer("zero"), 0);
  EXPECT_EQ(fields.Integer("signed"), -12);
  EXPECT_EQ(fields.Integer("plus"), 3);
}

// Numbers and booleans are plain scalars: quoted, or tagged as strings, they are text
// (`!!str 128` is not 128).
TEST(YamlFields, QuotedOrTaggedScalarsAreNotNumbers) {
  const YAML::Node node =
      ParseYamlDocument("quoted: '128'\ntagged: !!str 128\nflag: !!str true\nnumber: 2.5\n", "c.yaml");
  YamlFields fields(node, "c.yaml", "");
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("quoted"); }),
                       "quoted: must be an integer, got the string \"128\" (line 1)"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Integer("tagged"); }), "tagged: must be an integer, got '128' tagged"));
  EXPECT_TRUE(Contains(ErrorOf([&] { fields.Boolean("flag", false); }), "flag: must be true or false"));
  EXPECT_DOUBLE_EQ(fields.Number("number"), 2.5);
}

// A string is written plain, quoted or tagged !!str; `!!binary aGk=` is not the text
// "aGk=".
TEST(YamlFields, AStringTaggedAsAnotherTypeIsRefused) {
  const YAML::Node node = ParseYamlDocument("plain: a\nquoted: 'a'\nstr: !!str a\nbinary: !!binary aGk=\n", "c.yaml");
  YamlFields fields(node, "c.yaml", "");
  EXPECT_EQ(fields.String("plain"), "a");
  EXPECT_EQ(fields.String("quoted"), "a");
  EXPECT_EQ(fields.String("str"), "a");
  EXPECT_EQ(ErrorOf([&] { fields.String("binary"); }),
            "c.yaml: binary: must be a string, got 'aGk=' tagged !!binary (line 4)");
}

// yaml-cpp reads a quote never closed as a string to the end of the file, so the keys it
// swallows would be reported missing. The quote is named instead.
TEST(ParseYamlDocument, NamesAQuoteThatIsNeverClosed) {
  for (const std::string text : {"name: \"demo\ntraining:\n  stage: 3\n", "a: 1\nb: 'x\nc: 2\n",
                                 "a: 1\nlist:\n  - ok\n  - \"x\\\"\n", "'key: 1\n",
                                 // after a tag or an anchor, where yaml-cpp's mark is
                                 "name: !!str \"a100\nb: 1\n", "name: &n 'a100\nb: 1\n"}) {
    SCOPED_TRACE(text);
    const std::string error = ErrorOf([&] { ParseYamlDocument(text, "c.yaml"); });
    EXPECT_TRUE(Contains(error, "c.yaml: not valid YAML: the quote that opens on line ")) << error;
  }
  EXPECT_TRUE(Contains(ErrorOf([] { ParseYamlDocument("a: 1\nb: 'x\nc: 2\n", "c.yaml"); }), "opens on line 2 is"));
  // Closed quotes, however written, pass: escapes, '' inside single quotes, several lines.
  for (const std::string text : {"a: \"x \\\" y\"\n", "a: 'it''s'\n", "a: \"one\n  two\"\nb: 1\n",
                                 "a: &q 'x'\nb: *q\nc: [*q, *q]\n", "a: \"\\\\\"\n", "a: !!str 'x'\nb: ! \"y\"\n",
                                 // a byte-order mark, which yaml-cpp's positions leave out
                                 "\xef\xbb\xbf'k': \"v\"\n", "\xef\xbb\xbf{'x': \"y\"}\n"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ErrorOf([&] { ParseYamlDocument(text, "c.yaml"); }), "");
  }
}

}  // namespace
}  // namespace poplar
