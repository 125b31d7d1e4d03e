#include "planner/base/json_fields.h"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/range_text.h"
#include "planner/base/spelling.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

const nlohmann::json& Null() {
  static const nlohmann::json null;
  return null;
}

// How a value is named in an error: the string "4", '4.5', true, a collection.
std::string Shown(const nlohmann::json& value) {
  if (value.is_string()) return "the string \"" + Printable(value.get<std::string>()) + "\"";
  if (value.is_structured()) return "a collection";
  return "'" + Printable(value.dump()) + "'";
}

}  // namespace

std::string Hex64Text(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

nlohmann::json ParseJsonObject(const std::string& text, const std::string& file) {
  RequireNoNulByte(text, file);
  // The objects and lists being read, outermost first, each with where it has got to,
  // so that a repeated key is named by its whole path ("ranks[1].rank").
  struct Open {
    bool list = false;
    std::set<std::string> keys;  // an object's keys so far
    std::string key;             // an object's current key
    int index = -1;              // a list's current element
  };
  std::vector<Open> open;
  std::string repeated_key;
  const auto path = [&open] {
    std::string text;
    for (const Open& level : open) {
      text += level.list ? "[" + std::to_string(level.index) + "]" : (text.empty() ? "" : ".") + level.key;
    }
    return text;
  };
  const auto note_keys = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    const bool element = event == Event::object_start || event == Event::array_start || event == Event::value;
    if (element && !open.empty() && open.back().list) ++open.back().index;
    if (event == Event::object_start || event == Event::array_start) {
      Open level;
      level.list = event == Event::array_start;
      open.push_back(std::move(level));
    }
    if ((event == Event::object_end || event == Event::array_end) && !open.empty()) open.pop_back();
    if (event == Event::key && !open.empty()) {
      open.back().key = parsed.get<std::string>();
      if (!open.back().keys.insert(open.back().key).second && repeated_key.empty()) repeated_key = path();
    }
    return true;
  };
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text, note_keys);
  } catch (const nlohmann::json::exception& error) {
    // "[json.exception.parse_error.101] parse error at line 3, column 19: ...": the
    // library's tag means nothing to a user.
    std::string what = error.what();
    if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos) {
      what = what.substr(what.find("] ") + 2);
    }
    // It quotes what it last read, which may be any byte (a file in Latin-1's 0xFF):
    // shown as \xff, never passed to the terminal.
    throw InputError(file, "", "not valid JSON: " + AsciiText(what));
  }
  if (!repeated_key.empty()) throw InputError(file, repeated_key, "is given more than once in one object");
  if (!document.is_object()) throw InputError(file, "", "must be a JSON object");
  return document;
}

JsonFields::JsonFields(const nlohmann::json& node, std::string file, std::string path)
    : node_(node), file_(std::move(file)), path_(std::move(path)) {
  if (!node_.is_object()) throw InputError(file_, path_, "must be an object of keys to values");
}

std::string JsonFields::KeyPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void JsonFields::Fail(const std::string& key, const std::string& reason) const {
  throw InputError(file_, KeyPath(key), reason);
}

bool JsonFields::Has(const std::string& key) const {
  asked_.insert(key);
  const auto found = node_.find(key);
  return found != node_.end() && !found->is_null();
}

const nlohmann::json& JsonFields::Child(const std::string& key) {
  used_.insert(key);
  const auto found = node_.find(key);
  return found == node_.end() ? Null() : *found;
}

const nlohmann::json& JsonFields::Required(const std::string& key) {
  const nlohmann::json& child = Child(key);
  if (child.is_null() && node_.contains(key)) Fail(key, "is null; it needs a value");
  if (child.is_null()) {
    std::vector<std::string> others;  // as YamlFields::Required: a misspelt key is named
    for (const auto& [other, value] : node_.items()) {
      if (other != key && !used_.count(other)) others.push_back(other);
    }
    const std::string near = NearestName(key, others);
    Fail(key, "is required" + (near.empty() ? "" : "; found '" + near + "': a misspelling?"));
  }
  return child;
}

std::string JsonFields::String(const std::string& key) {
  const nlohmann::json& child = Required(key);
  if (!child.is_string()) Fail(key, "must be a string, got " + Shown(child));
  std::string value = child.get<std::string>();
  if (value.empty()) Fail(key, "must not be empty");
  return value;
}

std::optional<std::string> JsonFields::OptionalString(const std::string& key) {
  if (!Has(key)) {
    used_.insert(key);
    return std::nullopt;
  }
  return String(key);
}

std::int64_t JsonFields::Integer(const std::string& key) {
  const nlohmann::json& child = Required(key);
  if (child.is_number_integer() && (!child.is_number_unsigned() || child.get<std::uint64_t>() <= INT64_MAX)) {
    return child.get<std::int64_t>();
  }
  // JSON numbers beyond 64 bits arrive as floating point (100000000000000000000 as 1e+20).
  if (child.is_number() && std::abs(child.get<double>()) >= 9223372036854775808.0) {
    Fail(key, "is too large for an integer (at most 9223372036854775807 either way), got " + Shown(child));
  }
  Fail(key, "must be an integer, got " + Shown(child));
}

std::int64_t JsonFields::IntegerIn(const std::string& key, std::int64_t low, std::int64_t high,
                                   const std::string& what) {
  const std::int64_t value = Integer(key);
  if (value < low || value > high) {
    Fail(key, WholeNumberRangeReason(what, low, high) + ", got " + std::to_string(value));
  }
  return value;
}

double JsonFields::Number(const std::string& key) {
  const nlohmann::json& child = Required(key);
  if (!child.is_number()) Fail(key, "must be a number, got " + Shown(child));
  return child.get<double>();
}

double JsonFields::NumberIn(const std::string& key, double low, double high, const std::string& what) {
  const double value = Number(key);
  if (!(value >= low && value <= high)) Fail(key, "must be " + what + ", got " + node_.at(key).dump());
  return value;
}

std::uint64_t JsonFields::Hex64(const std::string& key) {
  const std::string digits = String(key);
  if (digits.size() != 16 || digits.find_first_not_of("0123456789abcdef") != std::string::npos) {
    Fail(key, "must be 16 hexadecimal digits (lower case), got '" + digits + "'");
  }
  return std::stoull(digits, nullptr, 16);
}

bool JsonFields::Boolean(const std::string& key, bool fallback) {
  const nlohmann::json& child = Child(key);
  if (child.is_null()) return fallback;
  if (!child.is_boolean()) Fail(key, "must be true or false, got " + Shown(child));
  return child.get<bool>();
}

const nlohmann::json& JsonFields::List(const std::string& key, std::size_t least, const std::string& what) {
  const nlohmann::json& list = Required(key);
  if (!list.is_array() || list.size() < least) Fail(key, "must be " + what);
  return list;
}

JsonFields JsonFields::Map(const std::string& key) { return JsonFields(Required(key), file_, KeyPath(key)); }

void JsonFields::Finish() const {
  for (const auto& [key, value] : node_.items()) {
    if (used_.count(key)) continue;
    throw InputError(file_, KeyPath(key), "unknown key" + UnknownKeyHint(key, used_, asked_));
  }
}

}  // namespace poplar
