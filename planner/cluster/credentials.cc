#include "planner/cluster/credentials.h"

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "planner/base/yaml_fields.h"

namespace poplar {

CredentialPaths ParseCredentials(YamlFields fields, const std::string& base_folder) {
  CredentialPaths paths;
  paths.ca = ResolveAgainst(base_folder, fields.String("ca"));
  paths.cert = ResolveAgainst(base_folder, fields.String("cert"));
  paths.key = ResolveAgainst(base_folder, fields.String("key"));
  paths.token = ResolveAgainst(base_folder, fields.String("token"));
  if (fields.Has("crl")) {
    paths.crl = ResolveAgainst(base_folder, fields.String("crl"));
  }
  fields.Finish();
  return paths;
}

std::string ReadToken(const std::string& path) {
  const std::string text = ReadTextFile(path);
  const std::string token = Trimmed(FirstLine(text));
  if (token.size() < 16) {
    throw InputError(path, "", "the token must be at least 16 characters (scripts/make-cluster-credentials makes one)");
  }
  // It travels as a gRPC header ("authorization: Bearer ..."), which takes printable
  // ASCII and, by default, 8 KiB of headers in all: other bytes failed every call as
  // "Illegal metadata", printing the token, and a longer one as a call that timed out.
  // (Not quoted here: it is a secret.)
  if (token.size() > 4096) {
    throw InputError(path, "",
                     "the token must be at most 4096 characters, not " + std::to_string(token.size()) +
                         " (scripts/make-cluster-credentials makes one of 64)");
  }
  for (std::size_t i = 0; i < token.size(); ++i) {
    const unsigned char byte = static_cast<unsigned char>(token[i]);
    if (byte < 0x21 || byte > 0x7e) {
      throw InputError(path, "",
                       "the token must be printable ASCII without spaces; character " + std::to_string(i + 1) +
                           " is not (scripts/make-cluster-credentials makes one)");
    }
  }
  return token;
}

}  // namespace poplar
