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
  const std::string token = Trimmed(text.substr(0, text.find('\n')));
  if (token.size() < 16) {
    throw InputError(path, "", "the token must be at least 16 characters (scripts/make-cluster-credentials makes one)");
  }
  return token;
}

}  // namespace poplar
