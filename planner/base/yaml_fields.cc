#include "planner/base/yaml_fields.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <cmath>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/range_text.h"
#include "planner/base/spelling.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

// The prefix of YAML's own types' tags: `!!int 4` is tagged tag:yaml.org,2002:int.
const std::string kCoreTag = "tag:yaml.org,2002:";

}  // namespace

YamlFields::YamlFields(const YAML::Node& node, std::string file, std::string path)
    : node_(node), file_(std::move(file)), path_(std::move(path)) {
  if (!node_.IsMap()) {
    throw InputError(file_, path_.empty() ? "" : path_, "must be a mapping of keys to values" + LineOf(node_));
  }
  std::set<std::string> seen;
  for (const auto& entry : node_) {
    // `[x]: 1` and `? {a: 1}` are keys too, to YAML; poplar's keys are names.
    if (!entry.first.IsScalar()) {
      throw InputError(file_, path_,
                       "has a key that is a collection" + LineOf(entry.first) + "; every key is a plain name");
    }
    const std::string key = entry.first.Scalar();
    if (!seen.insert(key).second) {
      throw InputError(file_, KeyPath(key), "is given more than once" + LineOf(entry.first));
    }
    // Here, not in Finish(): the keys a merge would have brought are otherwise reported
    // first, as missing.
    if (key == "<<") {
      throw InputError(file_, KeyPath(key),
                       "YAML merge keys are not supported" + LineOf(entry.first) + "; write the keys out in full");
    }
  }
}

// A plain scalar has no tag ("?" to yaml-cpp). A quoted one ('4', "true") is a string
// even where its text reads as a number ("!"), and so is one tagged `!!str 4`.
bool YamlFields::IsWrittenAs(const YAML::Node& node, std::initializer_list<const char*> types) {
  if (!node.IsScalar()) return false;
  if (node.Tag() == "?") return true;
  for (const char* type : types) {
    if (node.Tag() == kCoreTag + type) return true;
  }
  return false;
}

std::string YamlFields::Shown(const YAML::Node& node) {
  if (!node.IsScalar()) return "a collection";
  if (node.Tag() == "!") return "the string \"" + Printable(node.Scalar()) + "\"";
  if (node.Tag() != "?") {
    // Shown as written: !!binary.
    const std::string tag = node.Tag().rfind(kCoreTag, 0) == 0 ? "!!" + node.Tag().substr(kCoreTag.size()) : node.Tag();
    return "'" + Printable(node.Scalar()) + "' tagged " + Printable(tag);
  }
  return "'" + Printable(node.Scalar()) + "'";
}

namespace {

// The scalar that ends `node` in document order (a map's last value, or its key when
// that value is empty), if any. Recursion, not assignment: yaml-cpp's Node::operator=
// writes into the tree.
std::optional<YAML::Node> LastScalar(const YAML::Node& node) {
  if (node.IsScalar()) return node;
  if (node.IsSequence() && node.size() > 0) return LastScalar(node[node.size() - 1]);
  if (!node.IsMap() || node.size() == 0) return std::nullopt;
  YAML::const_iterator last = node.begin();
  for (auto entry = node.begin(); entry != node.end(); ++entry) last = entry;
  if (auto value = LastScalar(last->second)) return value;
  return LastScalar(last->first);
}

// yaml-cpp reads a quote that is never closed as a string running to the end of the
// file, and the keys swallowed by it are then reported as missing ("training: is
// required"). Such a string can only be the document's last scalar: returns it if its
// closing quote is missing from `text`, which is what yaml-cpp's positions count (the
// file after any UTF-8 byte-order mark).
std::optional<YAML::Node> UnclosedQuote(const YAML::Node& document, std::string_view text) {
  const std::optional<YAML::Node> last = LastScalar(document);
  if (!last || last->Mark().pos < 0) return std::nullopt;
  // A scalar's mark is at its anchor or tag when it has one (&name, !!str): the quote,
  // if any, comes after them. A plain scalar never begins with a quote.
  std::size_t at = last->Mark().pos;
  while (at < text.size() && (text[at] == '&' || text[at] == '!')) {
    at = text.find_first_not_of(" \t\r\n", text.find_first_of(" \t\r\n", at));  // npos past the end
  }
  if (at >= text.size() || (text[at] != '"' && text[at] != '\'')) return std::nullopt;
  const char quote = text[at];
  for (++at; at < text.size(); ++at) {
    if (quote == '"' && text[at] == '\\') {
      ++at;  // \" and \\ close nothing
    } else if (text[at] == quote) {
      if (quote == '\'' && at + 1 < text.size() && text[at + 1] == '\'') {
        ++at;  // '' is a quote inside single quotes
      } else {
        return std::nullopt;
      }
    }
  }
  return last;
}

// A bound as a user would write it: 0.001, 1000000 (no trailing zeros, no exponent
// below 10^15).
std::string Written(double value) {
  std::ostringstream text;
  text << std::setprecision(15) << value;
  return text.str();
}

// Where each document of a text starts, read without building it.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark start = YAML::Mark::null_mark();
};

// yaml-cpp's LoadAll never returns on some malformed text (a ',' outside any [] or {}):
// its parser yields an empty document at the same place again and again, each kept in
// memory. Walks the documents first and throws where one starts at the place the one
// before it started.
void RequireDocumentsAdvance(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  int previous = -1;
  while (parser.HandleNextDocument(starts)) {
    if (starts.start.pos == previous) {
      throw YAML::ParserException(starts.start,
                                  "nothing can be read from column " + std::to_string(starts.start.column + 1) + " on");
    }
    previous = starts.start.pos;
  }
}

}  // namespace

YAML::Node ParseYamlDocument(const std::string& text, const std::string& file) {
  RequireNoNulByte(text, file);
  std::vector<YAML::Node> documents;
  try {
    RequireDocumentsAdvance(text);
    documents = YAML::LoadAll(text);
  } catch (const YAML::DeepRecursion& error) {
    // yaml-cpp's own words for it are "bad file".
    throw InputError(file, "", "not valid YAML: nested too deeply (line " + std::to_string(error.mark.line + 1) + ")");
  } catch (const YAML::Exception& error) {
    throw InputError(file, "", "not valid YAML: " + error.msg + " (line " + std::to_string(error.mark.line + 1) + ")");
  }
  // A second document (after `---`) would be ignored; two files pasted into one are a
  // mistake to point out, not to half-read. Empty documents (a trailing `---`) are none.
  std::vector<YAML::Node> given;
  for (const auto& document : documents) {
    if (document && !document.IsNull()) given.push_back(document);
  }
  if (given.empty()) throw InputError(file, "", "is empty");
  // (A quote never closed swallows any `---` after it: the last document is the one.)
  const std::string_view counted = text.rfind("\xef\xbb\xbf", 0) == 0 ? std::string_view(text).substr(3) : text;
  if (const auto open = UnclosedQuote(given.back(), counted)) {
    throw InputError(
        file, "",
        "not valid YAML: the quote that opens on line " + std::to_string(open->Mark().line + 1) + " is never closed");
  }
  if (given.size() > 1) {
    throw InputError(file, "",
                     "holds " + std::to_string(given.size()) +
                         " YAML documents (separated by ---); it must hold one (the second begins on line " +
                         std::to_string(given[1].Mark().line + 1) + ")");
  }
  return given.front();
}

std::string YamlFields::LineOf(const YAML::Node& node) {
  if (!node.IsDefined() || node.Mark().line < 0) return "";
  return " (line " + std::to_string(node.Mark().line + 1) + ")";
}

std::string YamlFields::KeyPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void YamlFields::Fail(const std::string& key, const std::string& reason) const {
  // The key's own line: an empty value's mark is where the next token begins.
  for (const auto& entry : node_) {
    if (entry.first.Scalar() == key) throw InputError(file_, KeyPath(key), reason + LineOf(entry.first));
  }
  throw InputError(file_, KeyPath(key), reason);
}

bool YamlFields::Has(const std::string& key) const {
  asked_.insert(key);
  return static_cast<bool>(node_[key]);
}

YAML::Node YamlFields::Child(const std::string& key) {
  used_.insert(key);
  return node_[key];
}

YAML::Node YamlFields::Required(const std::string& key) {
  YAML::Node child = Child(key);
  // `stage: ~` or `stage:` has no value, which is said as such, optional key or not.
  if (child && child.IsNull()) Fail(key, "has no value (give one, or leave the key out where it is optional)");
  if (!child) {
    // A key given but misspelt ("global_bach") is the likely cause: name it here, where
    // it would otherwise be reported only as unknown, after this error.
    std::vector<std::string> others;
    for (const auto& entry : node_) {
      if (entry.first.Scalar() != key && !used_.count(entry.first.Scalar())) others.push_back(entry.first.Scalar());
    }
    const std::string near = NearestName(key, others);
    Fail(key, "is required" + LineOf(node_) +
                  (near.empty() ? "" : "; found '" + near + "'" + LineOf(node_[near]) + ": a misspelling?"));
  }
  return child;
}

YAML::Node YamlFields::List(const std::string& key, const std::string& what) {
  YAML::Node child = Required(key);
  if (!child.IsSequence() || child.size() == 0) Fail(key, "must be " + what);
  return child;
}

std::string YamlFields::String(const std::string& key) {
  YAML::Node child = Required(key);
  if (!child.IsScalar()) Fail(key, "must be a string");
  // Plain, quoted or !!str: `!!binary aGk=` would otherwise be read as its text.
  if (child.Tag() != "!" && !IsWrittenAs(child, {"str"})) {
    Fail(key, "must be a string, got " + Shown(child));
  }
  const std::string value = child.Scalar();
  if (value.empty()) Fail(key, "must not be empty");
  return value;
}

std::optional<std::string> YamlFields::OptionalString(const std::string& key) {
  if (!Has(key)) {
    used_.insert(key);
    return std::nullopt;
  }
  return String(key);
}

std::optional<YAML::Node> YamlFields::OptionalScalar(const std::string& key) {
  if (!Has(key)) {
    used_.insert(key);
    return std::nullopt;
  }
  YAML::Node child = Required(key);
  if (!child.IsScalar()) Fail(key, "must be a single value, got a collection");
  return child;
}

std::int64_t YamlFields::Integer(const std::string& key) {
  YAML::Node child = Required(key);
  // Decimal digits only: yaml-cpp would read 0127 as octal 87 (YAML 1.1) and 0x80 as hex.
  const std::string text = IsWrittenAs(child, {"int"}) ? child.Scalar() : "";
  const std::size_t sign = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  if (text.size() <= sign || text.find_first_not_of("0123456789", sign) != std::string::npos) {
    Fail(key, "must be an integer, got " + Shown(child));
  }
  if (text.size() > sign + 1 && text[sign] == '0') {
    Fail(key, "must be written without leading zeros, got " + Shown(child) + " (YAML would read it as octal)");
  }
  std::int64_t value = 0;
  if (!YAML::convert<std::int64_t>::decode(child, value)) {
    Fail(key, "is too large for an integer (at most 9223372036854775807 either way), got " + Shown(child));
  }
  return value;
}

std::int64_t YamlFields::IntegerIn(const std::string& key, std::int64_t low, std::int64_t high,
                                   const std::string& what) {
  const std::int64_t value = Integer(key);
  if (value < low || value > high) {
    Fail(key, WholeNumberRangeReason(what, low, high) + ", got " + std::to_string(value));
  }
  return value;
}

double YamlFields::Number(const std::string& key) {
  YAML::Node child = Required(key);
  double value = 0;
  if (!IsWrittenAs(child, {"int", "float"}) || !YAML::convert<double>::decode(child, value)) {
    Fail(key, "must be a number, got " + Shown(child));
  }
  // YAML spells infinity and nan (.inf, .nan); no setting of poplar's means either.
  if (!std::isfinite(value)) Fail(key, "must be a finite number, got " + Shown(child));
  return value;
}

double YamlFields::NumberIn(const std::string& key, double low, double high, const std::string& what) {
  const double value = Number(key);
  if (value < low || value > high) {
    Fail(key, "must be " + what + " from " + Written(low) + " to " + Written(high) + ", got " + Child(key).Scalar());
  }
  return value;
}

bool YamlFields::Boolean(const std::string& key, bool fallback) {
  YAML::Node child = Child(key);
  if (!child || child.IsNull()) return fallback;
  if (!IsWrittenAs(child, {"bool"}) || (child.Scalar() != "true" && child.Scalar() != "false")) {
    Fail(key, "must be true or false, got " + Shown(child));
  }
  return child.Scalar() == "true";
}

YamlFields YamlFields::Map(const std::string& key) {
  YAML::Node child = Required(key);
  return YamlFields(child, file_, KeyPath(key));
}

void YamlFields::Finish() const {
  for (const auto& entry : node_) {
    const std::string key = entry.first.Scalar();
    if (used_.count(key)) continue;
    throw InputError(file_, KeyPath(key), "unknown key" + LineOf(entry.first) + UnknownKeyHint(key, used_, asked_));
  }
}

}  // namespace poplar
