#include "agent/rpc/tls.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/server_builder.h>

#include <iostream>
#include <vector>

#include "agent/rpc/certificate_check.h"
#include "agent/rpc/grpc_log.h"
#include "planner/base/input_error.h"
#include "planner/base/text_file.h"
#include "poplar/v1/agent.grpc.pb.h"

namespace poplar {
namespace {

constexpr char kHeader[] = "authorization";

std::string ReadCredential(const std::string& path, const std::string& source, const std::string& key) {
  try {
    return ReadTextFile(path);
  } catch (const InputError& error) {
    throw InputError(
        source, "credentials." + key,
        "cannot read " + path + " (" + error.reason() + "); scripts/make-cluster-credentials makes these files");
  }
}

std::string Token(const CredentialPaths& paths, const std::string& source) {
  try {
    return ReadToken(paths.token);
  } catch (const InputError& error) {
    throw InputError(source, "credentials.token", error.reason() + " (" + paths.token + ")");
  }
}

// Compares in time that does not depend on where the texts differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

// Refuses every call whose metadata lacks the cluster token.
class TokenChecker : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenChecker(std::string token) : expected_("Bearer " + std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata* consumed,
                       OutputMetadata*) override {
    const auto found = metadata.find(kHeader);
    if (found == metadata.end()) {
      return {grpc::StatusCode::UNAUTHENTICATED, "the call carries no cluster token"};
    }
    const std::string given(found->second.data(), found->second.size());
    if (!ConstantTimeEquals(given, expected_)) {
      return {grpc::StatusCode::UNAUTHENTICATED, "the cluster token is wrong"};
    }
    consumed->insert({kHeader, given});
    return grpc::Status::OK;
  }

 private:
  const std::string expected_;
};

// Adds the token to every call of a channel.
class TokenPlugin : public grpc::MetadataCredentialsPlugin {
 public:
  explicit TokenPlugin(std::string token) : value_("Bearer " + std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                           std::multimap<std::string, std::string>* metadata) override {
    metadata->insert({kHeader, value_});
    return grpc::Status::OK;
  }

 private:
  const std::string value_;
};

// The agent's TLS: its certificate, callers' certificates signed by the CA, with the
// client purpose, and not on the CA's revocation list when there is one (paths.crl).
std::shared_ptr<grpc::ServerCredentials> AgentTls(const CredentialPaths& paths, const std::string& source) {
  namespace tls = grpc::experimental;
  auto provider = std::make_shared<tls::StaticDataCertificateProvider>(
      ReadCredential(paths.ca, source, "ca"),
      std::vector<tls::IdentityKeyCertPair>{
          {ReadCredential(paths.key, source, "key"), ReadCredential(paths.cert, source, "cert")}});
  tls::TlsServerCredentialsOptions options(provider);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!paths.crl.empty()) options.set_crl_directory(paths.crl);
  return tls::TlsServerCredentials(options);
}

// A server's TLS from the three files, for checking that they serve (CheckTlsFilesServe).
std::shared_ptr<grpc::ServerCredentials> ServerTls(const CredentialPaths& paths, const std::string& source) {
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = ReadCredential(paths.ca, source, "ca");
  options.pem_key_cert_pairs.push_back(
      {ReadCredential(paths.key, source, "key"), ReadCredential(paths.cert, source, "cert")});
  return grpc::SslServerCredentials(options);
}

// gRPC accepts any text as PEM when credentials are made and says what is wrong only in
// its log, when a server starts or a connection is made: the head would see "empty
// address list" and the agent a failure to listen. A throwaway TLS server on a free
// loopback port, with the same three files, starts only if they are usable together.
void CheckTlsFilesServe(const std::shared_ptr<grpc::ServerCredentials>& tls, const CredentialPaths& paths,
                        const std::string& source) {
  GrpcLogCapture log;
  grpc::ServerBuilder probe;
  int port = 0;
  probe.AddListeningPort("127.0.0.1:0", tls, &port);
  v1::Agent::Service unimplemented;  // a server starts only with a service to serve
  probe.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> server = probe.BuildAndStart();
  if (!server || port == 0) {
    throw InputError(source, "credentials",
                     "gRPC cannot use these files for TLS (ca " + paths.ca + ", cert " + paths.cert + ", key " +
                         paths.key + "): is the key the certificate's, and are all three PEM? (gRPC: " + log.Take() +
                         ")");
  }
  server->Shutdown();
}

// The checks both sides make of their own files before gRPC gets them: the certificate
// (certificate_check.h), then that `tls`, made from the same files, serves.
void CheckOwnFiles(const std::shared_ptr<grpc::ServerCredentials>& tls, const CredentialPaths& paths,
                   const std::string& source, const std::string& speaker, CertificateRole role) {
  const std::string warning = CheckOwnCertificate(paths, source, role);
  if (!warning.empty()) std::cerr << speaker << ": warning: " << warning << std::endl;
  CheckTlsFilesServe(tls, paths, source);
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> AgentServerCredentials(const CredentialPaths& paths, const std::string& source,
                                                                const std::string& speaker) {
  CheckOwnFiles(ServerTls(paths, source), paths, source, speaker, CertificateRole::kAgent);
  auto credentials = AgentTls(paths, source);
  credentials->SetAuthMetadataProcessor(std::make_shared<TokenChecker>(Token(paths, source)));
  return credentials;
}

std::shared_ptr<grpc::ChannelCredentials> HeadChannelCredentials(const CredentialPaths& paths,
                                                                 const std::string& source,
                                                                 const std::string& speaker) {
  // The head's certificate serves too: same CA, same checks.
  CheckOwnFiles(ServerTls(paths, source), paths, source, speaker, CertificateRole::kHead);
  namespace tls = grpc::experimental;
  tls::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(std::make_shared<tls::StaticDataCertificateProvider>(
      ReadCredential(paths.ca, source, "ca"),
      std::vector<tls::IdentityKeyCertPair>{
          {ReadCredential(paths.key, source, "key"), ReadCredential(paths.cert, source, "cert")}}));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(std::make_shared<tls::HostNameCertificateVerifier>());
  if (!paths.crl.empty()) options.set_crl_directory(paths.crl);
  return grpc::CompositeChannelCredentials(
      tls::TlsCredentials(options),
      grpc::MetadataCredentialsFromPlugin(std::make_unique<TokenPlugin>(Token(paths, source))));
}

}  // namespace poplar
