// CheckOwnCertificate's verdicts on certificates made here with OpenSSL, dates included:
// the cases scripts/make-cluster-credentials cannot make (a certificate not valid yet, a
// CA that has expired or is not valid yet, one expiring within a day).
#include "agent/rpc/certificate_check.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <string>

#include "planner/base/input_error.h"
#include "test_support.h"

namespace poplar {
namespace {

using testing::Contains;
using testing::ContainsAll;
using testing::ScratchDir;

constexpr long kDay = 24 * 3600;

using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Certificate = std::unique_ptr<X509, decltype(&X509_free)>;

Key NewKey() { return Key(EVP_EC_gen("P-256"), EVP_PKEY_free); }

void AddExtension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  ASSERT_NE(extension, nullptr) << value;
  X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
}

// A certificate for `key`, valid from now + `from_s` to now + `until_s`, signed by
// `issuer` with `issuer_key` (itself when `issuer` is null): a CA, or an agent's
// certificate (serverAuth).
Certificate Make(const std::string& name, EVP_PKEY* key, long from_s, long until_s, bool ca, X509* issuer,
                 EVP_PKEY* issuer_key) {
  Certificate certificate(X509_new(), X509_free);
  X509_set_version(certificate.get(), 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(certificate.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(certificate.get()), from_s);
  X509_gmtime_adj(X509_getm_notAfter(certificate.get()), until_s);
  X509_set_pubkey(certificate.get(), key);
  X509_NAME* subject = X509_get_subject_name(certificate.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1,
                             0);
  X509* signer = issuer ? issuer : certificate.get();
  X509_set_issuer_name(certificate.get(), X509_get_subject_name(signer));
  if (ca) {
    AddExtension(certificate.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(certificate.get(), signer, NID_key_usage, "critical,keyCertSign");
  } else {
    AddExtension(certificate.get(), signer, NID_ext_key_usage, "serverAuth");
  }
  X509_sign(certificate.get(), issuer_key ? issuer_key : key, EVP_sha256());
  return certificate;
}

std::string WritePem(const ScratchDir& dir, const std::string& name, X509* certificate) {
  const std::string path = dir.path() + "/" + name;
  struct CloseFile {
    void operator()(FILE* file) const { std::fclose(file); }
  };
  std::unique_ptr<FILE, CloseFile> file(std::fopen(path.c_str(), "w"));
  PEM_write_X509(file.get(), certificate);
  return path;
}

// A CA valid over [ca_from, ca_until] and an agent certificate over [from, until] signed by
// it (seconds from now), as the files CheckOwnCertificate reads.
CredentialPaths Chain(const ScratchDir& dir, long ca_from, long ca_until, long from, long until) {
  const Key ca_key = NewKey(), key = NewKey();
  const Certificate ca = Make("test CA", ca_key.get(), ca_from, ca_until, true, nullptr, nullptr);
  const Certificate leaf = Make("poplar-agent", key.get(), from, until, false, ca.get(), ca_key.get());
  return {WritePem(dir, "ca.pem", ca.get()), WritePem(dir, "agent.pem", leaf.get()), "", ""};
}

// The InputError CheckOwnCertificate throws for `paths` ("" and a failure if none).
std::string Refusal(const CredentialPaths& paths, std::string* key) {
  try {
    CheckOwnCertificate(paths, "agent.yaml", CertificateRole::kAgent);
  } catch (const InputError& error) {
    *key = error.key();
    return error.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(CheckOwnCertificate, AcceptsAValidChainWithoutAWarning) {
  ScratchDir dir("certificate-check");
  EXPECT_EQ(
      CheckOwnCertificate(Chain(dir, -kDay, 3650 * kDay, -kDay, 365 * kDay), "agent.yaml", CertificateRole::kAgent),
      "");
}

TEST(CheckOwnCertificate, ACertificateNotValidYetAsksAboutTheClock) {
  ScratchDir dir("certificate-check");
  std::string key;
  const std::string error = Refusal(Chain(dir, -kDay, 3650 * kDay, 2 * kDay, 365 * kDay), &key);
  EXPECT_EQ(key, "credentials.cert");
  EXPECT_TRUE(ContainsAll(error, {"agent.pem is valid only from ", "is this machine's clock right?"})) << error;
}

TEST(CheckOwnCertificate, AnExpiredCaIsNamedAsTheCa) {
  ScratchDir dir("certificate-check");
  std::string key;
  const std::string error = Refusal(Chain(dir, -10 * kDay, -kDay, -kDay, 365 * kDay), &key);
  EXPECT_EQ(key, "credentials.ca");
  EXPECT_TRUE(ContainsAll(
      error, {"ca.pem: the CA certificate that signs ", "agent.pem: certificate has expired", "make new credentials"}))
      << error;
}

TEST(CheckOwnCertificate, ACaNotValidYetIsNamedAsTheCa) {
  ScratchDir dir("certificate-check");
  std::string key;
  const std::string error = Refusal(Chain(dir, 2 * kDay, 3650 * kDay, -kDay, 365 * kDay), &key);
  EXPECT_EQ(key, "credentials.ca");
  EXPECT_TRUE(ContainsAll(error, {"ca.pem: the CA certificate that signs ", "certificate is not yet valid"})) << error;
}

TEST(CheckOwnCertificate, WarnsOfACertificateOrCaEndingWithinADay) {
  ScratchDir dir("certificate-check");
  const std::string leaf =
      CheckOwnCertificate(Chain(dir, -kDay, 3650 * kDay, -kDay, 3600), "agent.yaml", CertificateRole::kAgent);
  EXPECT_TRUE(ContainsAll(leaf, {"agent.yaml: credentials.cert: ", "agent.pem expires on ", ", within a day"})) << leaf;
  const std::string ca =
      CheckOwnCertificate(Chain(dir, -kDay, 2 * kDay + 3600, -kDay, 365 * kDay), "agent.yaml", CertificateRole::kAgent);
  EXPECT_TRUE(ContainsAll(ca, {"agent.yaml: credentials.ca: ", "the CA certificate that signs", ", in 2 days"})) << ca;
}

}  // namespace
}  // namespace poplar
