// Checks a side's own TLS certificate before it serves (the agent) or calls (the head),
// with OpenSSL: the certificate must be signed by the cluster's CA and valid now. Either
// fault otherwise shows only at the other end, as a failed handshake ("are its
// certificate and the cluster's credentials from one CA?", "closed the connection")
// on every call, after the agent started or the head had made its plan.
#pragma once

#include <string>

#include "planner/cluster/credentials.h"

namespace poplar {

// What a side's certificate is for: the agent's serves (serverAuth), the head's
// calls (clientAuth); the other side refuses one whose extended key usage says otherwise.
enum class CertificateRole { kAgent, kHead };

// Throws InputError naming `source` (the agent or cluster file), the key
// (credentials.cert or credentials.ca) and the reason: a file that holds no PEM
// certificate, a certificate not signed by the CA, one expired (with the date), one not
// valid yet (with the date: a clock wrong?), one not meant for `role`, a CA expired.
// Returns a warning for a certificate or CA that expires within 30 days ("" if none).
// The key is checked against the certificate elsewhere (tls.cc: gRPC must be able to
// serve with them).
std::string CheckOwnCertificate(const CredentialPaths& paths, const std::string& source, CertificateRole role);

}  // namespace poplar
