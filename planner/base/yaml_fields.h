// Typed, validated access to the fields of a YAML mapping, for the file parsers.
//
// A YamlFields wraps one mapping node and the dotted key path that leads to it. Each
// getter names the full key path in the InputError it throws, and Finish() rejects
// keys that no getter asked for, so a misspelt key is an error, never silently ignored.
// A key given twice is an error. Numbers and booleans must be plain scalars: a quoted
// "4" is a string. (JSON files have their twin, JsonFields in json_fields.h.)
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>

namespace poplar {

// Parses `text` as one YAML document. Throws InputError naming `file`: not valid YAML
// (with the line), a quote never closed, empty, or more than one document.
YAML::Node ParseYamlDocument(const std::string& text, const std::string& file);

class YamlFields {
 public:
  // Throws InputError unless `node` is a mapping.
  YamlFields(const YAML::Node& node, std::string file, std::string path);

  bool Has(const std::string& key) const;
  YAML::Node Child(const std::string& key);  // marks the key used; may be undefined

  std::string String(const std::string& key);
  std::optional<std::string> OptionalString(const std::string& key);
  // A single value, however written, for a key whose values are of several kinds
  // (`stage: auto` or `stage: 3`); absent: nullopt. Throws if null or a collection.
  std::optional<YAML::Node> OptionalScalar(const std::string& key);
  std::int64_t Integer(const std::string& key);
  // An integer from `low` to `high`; `what` names it in the error: "must be a number of
  // samples from 1 to 1000000, got 2000000".
  std::int64_t IntegerIn(const std::string& key, std::int64_t low, std::int64_t high, const std::string& what);
  double Number(const std::string& key);  // finite: .inf and .nan are refused
  // A number from `low` to `high`, as IntegerIn: "must be a slowdown factor from 1 to
  // 1000, got 0.5".
  double NumberIn(const std::string& key, double low, double high, const std::string& what);
  // Optional true/false; `fallback` when absent.
  bool Boolean(const std::string& key, bool fallback);
  // A nested mapping; throws if absent.
  YamlFields Map(const std::string& key);

  // Throws InputError naming the first key that was never read, with the nearest key
  // the parser knows ("did you mean credentials?") and all of them.
  void Finish() const;

  std::string KeyPath(const std::string& key) const;
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

  // A required, non-empty sequence; `what` says what it must be ("a non-empty list of
  // nodes"). Absent, a misspelt key beside it is named, as for every required key.
  YAML::Node List(const std::string& key, const std::string& what);

  // Error helpers shared with the parsers. Fail throws InputError for `key` with
  // `reason` and, when the key is in this mapping, its line: "(line 7)".
  [[noreturn]] void Fail(const std::string& key, const std::string& reason) const;
  static std::string LineOf(const YAML::Node& node);
  // A number or boolean is written plain (`4`, `true`) or tagged with its YAML type
  // (`!!int 4`), one of `types` ("int", "float", "bool"); quoted ('4') it is a string.
  static bool IsWrittenAs(const YAML::Node& node, std::initializer_list<const char*> types);
  // A value as an error shows it: 'fp16', the string "4", a collection.
  static std::string Shown(const YAML::Node& node);

 private:
  YAML::Node Required(const std::string& key);

  YAML::Node node_;
  std::string file_;
  std::string path_;
  std::set<std::string> used_;
  mutable std::set<std::string> asked_;  // keys Has() looked for: known, though absent
};

}  // namespace poplar
