#include "planner/credentials.h"

#include "planner/input_error.h"
#include "planner/text_file.h"
#include "planner/yaml_fields.h"

namespace poplar {

CredentialPaths ParseCredentials(YamlFields fields, const std::string& base_folder) {
  CredentialPaths paths;
  paths.ca = ResolveAgainst(base_folder, fields.String("ca"));
  paths.cert = ResolveAgainst(base_folder, fields.String("cert"));
  paths.key = ResolveAgainst(base_folder, fields.String("key"));
  paths.token = ResolveAgainst(base_folder, fields.String("token"));
  fields.Finish();
  return paths;
}

std::string ReadToken(const std::string& path) {
  const std::string text = ReadTextFile(path);
  const auto end_of_line = text.find('\n');
  std::string token = text.substr(0, end_of_line);
  const auto first = token.find_first_not_of(" \t\r");
  const auto last = token.find_last_not_of(" \t\r");
  token = first == std::string::npos ? "" : token.substr(first, last - first + 1);
  if (token.size() < 16) {
    throw InputError(path, "", "the token must be at least 16 characters (scripts/make-cluster-credentials makes one)");
  }
  return token;
}

}  // namespace poplar
