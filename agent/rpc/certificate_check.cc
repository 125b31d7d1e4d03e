#include "agent/rpc/certificate_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "planner/base/input_error.h"
#include "planner/base/text_file.h"

namespace poplar {
namespace {

constexpr int kWarnDays = 30;

struct X509Free {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
using Certificate = std::unique_ptr<X509, X509Free>;

// Every certificate in a PEM file, in order (a chain may follow a leaf); none if the
// text holds none.
std::vector<Certificate> ReadCertificates(const std::string& path, const std::string& source, const std::string& key) {
  std::string text;
  try {
    text = ReadTextFile(path);
  } catch (const InputError& error) {
    throw InputError(source, key, "cannot read " + path + " (" + error.reason() + ")");
  }
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), BIO_free);
  std::vector<Certificate> certificates;
  while (X509* certificate = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(certificate);
  }
  ERR_clear_error();  // the loop ends on "no start line"
  if (certificates.empty()) throw InputError(source, key, path + " holds no PEM certificate");
  return certificates;
}

// "Nov 23 22:32:06 2026 GMT"
std::string TimeText(const ASN1_TIME* time) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  ASN1_TIME_print(bio.get(), time);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(size));
}

constexpr char kRenew[] =
    "; make new credentials with scripts/make-cluster-credentials (every node then needs the new ca.pem)";

// Why `context`'s check of `paths.cert` failed, as the InputError that names the file at
// fault: the CA, the revocation list or the certificate.
[[noreturn]] void ThrowVerifyFailure(X509_STORE_CTX* context, const CredentialPaths& paths, const std::string& source,
                                     CertificateRole role) {
  const int error = X509_STORE_CTX_get_error(context);
  const int depth = X509_STORE_CTX_get_error_depth(context);  // 0: the leaf; above: a CA
  ERR_clear_error();
  if (error == X509_V_ERR_UNABLE_TO_GET_CRL || error == X509_V_ERR_CRL_HAS_EXPIRED ||
      error == X509_V_ERR_CRL_SIGNATURE_FAILURE || error == X509_V_ERR_CRL_NOT_YET_VALID) {
    throw InputError(source, "credentials.crl",
                     paths.crl + " holds no valid revocation list of the CA in credentials.ca (OpenSSL: " +
                         X509_verify_cert_error_string(error) +
                         "); copy the cluster's crl/ folder, which scripts/make-cluster-credentials writes");
  }
  if (error == X509_V_ERR_CERT_REVOKED) {
    throw InputError(source, "credentials.cert",
                     paths.cert + " is revoked (the list in credentials.crl says so): " +
                         (role == CertificateRole::kAgent
                              ? "this node needs a new certificate (scripts/make-cluster-credentials DIR --add-node "
                                "NAME)"
                              : "the head needs a new certificate (scripts/make-cluster-credentials DIR --new-head)"));
  }
  if (error == X509_V_ERR_CERT_HAS_EXPIRED || error == X509_V_ERR_CERT_NOT_YET_VALID) {
    throw InputError(source, "credentials.ca",
                     paths.ca + ": the CA certificate that signs " + paths.cert + ": " +
                         X509_verify_cert_error_string(error) + kRenew);
  }
  if (error == X509_V_ERR_INVALID_PURPOSE && depth > 0) {
    throw InputError(source, "credentials.ca",
                     paths.ca + ": the CA certificate that signs " + paths.cert + " is not meant to sign " +
                         (role == CertificateRole::kAgent ? "agents'" : "the head's") +
                         " certificates (its extended key usage)" + kRenew);
  }
  if (error == X509_V_ERR_INVALID_PURPOSE) {
    throw InputError(
        source, "credentials.cert",
        paths.cert + " is not meant for " +
            (role == CertificateRole::kAgent ? "an agent (it lacks serverAuth; a node's nodes/NAME.pem has it)"
                                             : "the head (it lacks clientAuth; head.pem has it)") +
            ": the other side would refuse it");
  }
  const bool unsigned_by_ca =
      error == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY || error == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
      error == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE || error == X509_V_ERR_CERT_SIGNATURE_FAILURE;
  throw InputError(source, "credentials.cert",
                   paths.cert + (unsigned_by_ca ? " is not signed by" : " does not verify against") +
                       " the cluster's CA in credentials.ca (" + paths.ca +
                       "): are both from one scripts/make-cluster-credentials run? (OpenSSL: " +
                       X509_verify_cert_error_string(error) + ")");
}

// A warning for the certificate, or a CA above it in `context`'s verified chain, that
// expires first, within kWarnDays; "" if none does. `made` says how to renew the
// certificate.
std::string ExpiryWarning(X509_STORE_CTX* context, const CredentialPaths& paths, const std::string& source,
                          const std::string& made) {
  STACK_OF(X509)* verified = X509_STORE_CTX_get0_chain(context);
  int soonest = -1, soonest_days = kWarnDays;
  for (int i = 0; i < sk_X509_num(verified); ++i) {
    int days = 0, seconds = 0;
    if (ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(sk_X509_value(verified, i))) == 1 &&
        days < soonest_days) {
      soonest = i;
      soonest_days = days;
    }
  }
  if (soonest < 0) return "";
  const ASN1_TIME* end = X509_get0_notAfter(sk_X509_value(verified, soonest));
  const std::string in = soonest_days == 0
                             ? ", within a day"
                             : ", in " + std::to_string(soonest_days) + (soonest_days == 1 ? " day" : " days");
  if (soonest == 0) return source + ": credentials.cert: " + paths.cert + " expires on " + TimeText(end) + in + made;
  return source + ": credentials.ca: " + paths.ca + ": the CA certificate that signs " + paths.cert + " expires on " +
         TimeText(end) + in + kRenew;
}

}  // namespace

std::string CheckOwnCertificate(const CredentialPaths& paths, const std::string& source, CertificateRole role) {
  const std::vector<Certificate> own = ReadCertificates(paths.cert, source, "credentials.cert");
  const std::vector<Certificate> authorities = ReadCertificates(paths.ca, source, "credentials.ca");
  X509* leaf = own.front().get();
  const std::string made =
      "; make new credentials with scripts/make-cluster-credentials, or sign a new certificate "
      "with the cluster's CA key";

  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    throw InputError(source, "credentials.cert",
                     paths.cert + " expired on " + TimeText(X509_get0_notAfter(leaf)) + made);
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    throw InputError(
        source, "credentials.cert",
        paths.cert + " is valid only from " + TimeText(X509_get0_notBefore(leaf)) + ": is this machine's clock right?");
  }

  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  for (const Certificate& authority : authorities) X509_STORE_add_cert(store.get(), authority.get());
  if (!paths.crl.empty()) {  // the list the agent's TLS checks callers against; its own certificate too
    if (!std::filesystem::is_directory(paths.crl)) {
      throw InputError(source, "credentials.crl",
                       paths.crl + " is not a folder (scripts/make-cluster-credentials writes crl/)");
    }
    X509_LOOKUP* lookup = X509_STORE_add_lookup(store.get(), X509_LOOKUP_hash_dir());
    if (lookup == nullptr || X509_LOOKUP_add_dir(lookup, paths.crl.c_str(), X509_FILETYPE_PEM) != 1) {
      throw std::runtime_error("OpenSSL could not read the folder " + paths.crl);
    }
    X509_STORE_set_flags(store.get(), X509_V_FLAG_CRL_CHECK);
  }
  struct StackFree {  // the stack only: the certificates stay `own`'s
    void operator()(STACK_OF(X509) * stack) const { sk_X509_free(stack); }
  };
  std::unique_ptr<STACK_OF(X509), StackFree> chain(sk_X509_new_null());
  for (std::size_t i = 1; i < own.size(); ++i) sk_X509_push(chain.get(), own[i].get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> context(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  if (!context || X509_STORE_CTX_init(context.get(), store.get(), leaf, chain.get()) != 1 ||
      X509_STORE_CTX_set_purpose(
          context.get(), role == CertificateRole::kAgent ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT) != 1) {
    throw std::runtime_error("OpenSSL could not set up a certificate check");
  }
  if (X509_verify_cert(context.get()) != 1) ThrowVerifyFailure(context.get(), paths, source, role);
  return ExpiryWarning(context.get(), paths, source, made);
}

}  // namespace poplar
