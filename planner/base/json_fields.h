// Typed, validated access to the fields of a JSON object, for the parsers of the JSON
// files (plan, profile, model configuration). The twin of YamlFields (yaml_fields.h)
// for documents that are JSON by contract, so that their readers, the worker among
// them, need no YAML library.
//
// A JsonFields wraps one object and the dotted key path that leads to it. Each getter
// names the full key path in the InputError it throws, and Finish() rejects keys that
// no getter asked for, so a misspelt key is an error, never silently ignored. Numbers
// and booleans must be JSON numbers and booleans: "4" is a string. null is absent.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

namespace poplar {

// Parses `text` as one JSON object. Throws InputError naming `file`: not valid JSON,
// not an object, or a key given twice in one object (which a JSON library would
// otherwise resolve silently).
nlohmann::json ParseJsonObject(const std::string& text, const std::string& file);

// `value` as 16 hexadecimal digits, lower case: how JSON files write 64-bit ids and hashes
// (a JSON number loses digits beyond 2^53 in many readers).
std::string Hex64Text(std::uint64_t value);

class JsonFields {
 public:
  // Throws InputError unless `node` is an object. `node` must outlive this, so a
  // temporary is refused at compile time.
  JsonFields(const nlohmann::json& node, std::string file, std::string path);
  JsonFields(nlohmann::json&& node, std::string file, std::string path) = delete;

  bool Has(const std::string& key) const;  // present and not null
  // Marks the key used; a null value when absent.
  const nlohmann::json& Child(const std::string& key);

  std::string String(const std::string& key);
  std::optional<std::string> OptionalString(const std::string& key);
  std::int64_t Integer(const std::string& key);
  // An integer from `low` to `high`; `what` names it in the error: "must be a number of
  // samples from 1 to 1000000, got 2000000".
  std::int64_t IntegerIn(const std::string& key, std::int64_t low, std::int64_t high, const std::string& what);
  double Number(const std::string& key);
  // A number from `low` to `high`; `what` says so in the error, which adds the value
  // given: "must be a number of seconds from 0 to 86400, got 1e+09".
  double NumberIn(const std::string& key, double low, double high, const std::string& what);
  // A 64-bit value written as Hex64Text's 16 hexadecimal digits (lower case).
  std::uint64_t Hex64(const std::string& key);
  bool Boolean(const std::string& key, bool fallback);  // `fallback` when absent
  JsonFields Map(const std::string& key);               // a nested object; required
  // A required list of at least `least` entries; `what` says what it must be ("a
  // non-empty list of {rank, micro_batches}"). Absent, a misspelt key beside it is named.
  const nlohmann::json& List(const std::string& key, std::size_t least, const std::string& what);

  // Throws InputError naming the first key that was never read.
  void Finish() const;

  std::string KeyPath(const std::string& key) const;
  const std::string& file() const { return file_; }
  [[noreturn]] void Fail(const std::string& key, const std::string& reason) const;

 private:
  const nlohmann::json& Required(const std::string& key);

  const nlohmann::json& node_;
  std::string file_;
  std::string path_;
  std::set<std::string> used_;
  mutable std::set<std::string> asked_;  // keys Has() looked for: known, though absent
};

}  // namespace poplar
