// gRPC credentials from a cluster's credential files (planner/cluster/credentials.h).
//
// Server (agent): TLS with the agent's certificate; the caller must present a client
// certificate (clientAuth) signed by the cluster's CA and not on its revocation list
// (credentials.crl, when given), and every call must carry the header
// `authorization: Bearer <token>`, checked in constant time before any handler runs.
// Client (head node): TLS trusting only the cluster's CA and an agent certificate that
// names the host dialled (each node's names its own) and is not on the CA's revocation
// list (credentials.crl, when given), presenting the head's certificate, and adding the
// token to every call.
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "planner/cluster/credentials.h"

namespace poplar {

// Both throw InputError naming `source` (the agent or cluster file) and the key when a
// credential file cannot be read, when the certificate is not the CA's or not valid now
// (certificate_check.h), and naming `credentials` when the files cannot be used
// together (a key that is not the certificate's, a file that is not PEM). A certificate
// that expires within 30 days is said on stderr, after "<speaker>: warning: ".
std::shared_ptr<grpc::ServerCredentials> AgentServerCredentials(const CredentialPaths& paths, const std::string& source,
                                                                const std::string& speaker);
std::shared_ptr<grpc::ChannelCredentials> HeadChannelCredentials(const CredentialPaths& paths,
                                                                 const std::string& source, const std::string& speaker);

}  // namespace poplar
