// The files that secure the link between the head node and the agents
// (docs/operations.md, security): TLS certificates signed by the cluster's CA (one per
// node, one for the head) and a shared token, made by scripts/make-cluster-credentials.
// The head names its set in the cluster file, each agent in its agent file:
//
//   credentials:
//     ca: credentials/ca.pem        # the cluster's CA; peers must be signed by it
//     cert: credentials/head.pem    # this side's certificate (nodes/NAME.pem on agents)
//     key: credentials/head.key     # its private key
//     token: credentials/token      # the shared token (one line)
//     crl: credentials/crl          # optional: the CA's revocation list (crl/)
//
// Paths are relative to the file that names them. This is plain data: the gRPC code
// that turns it into credentials lives in agent/.
#pragma once

#include <string>

namespace poplar {

class YamlFields;  // yaml_fields.h: only the YAML parsers that call ParseCredentials need it

struct CredentialPaths {
  std::string ca;
  std::string cert;
  std::string key;
  std::string token;
  // A folder of revocation lists named as OpenSSL looks them up (<hash of the CA>.r0):
  // an agent refuses callers, the head agents, whose certificate is on its CA's list.
  // Empty: none.
  std::string crl;
};

// Reads the keys of a `credentials` mapping, resolving paths against `base_folder`.
CredentialPaths ParseCredentials(YamlFields fields, const std::string& base_folder);

// The token file's first line, without surrounding whitespace. Throws InputError if the
// file cannot be read or the token is shorter than 16 characters.
std::string ReadToken(const std::string& path);

}  // namespace poplar
