#include "server/frontend/tls_credentials.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace tally {
namespace {

struct BioCloser {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Freer {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFreer {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

absl::Status Bad(absl::string_view flag, absl::string_view file, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, "=", file, ": ", why));
}

// The first certificate of the chain and the key must belong together: gRPC
// would otherwise start, and fail every handshake.
absl::Status CheckKeyAndCertificate(const TlsOptions& o) {
  std::unique_ptr<BIO, BioCloser> cert_in(BIO_new_file(o.cert_file.c_str(), "r"));
  if (!cert_in) return Bad("--tls_cert_file", o.cert_file, "cannot be read.");
  std::unique_ptr<X509, X509Freer> cert(PEM_read_bio_X509(cert_in.get(), nullptr, nullptr, nullptr));
  if (!cert) return Bad("--tls_cert_file", o.cert_file, "holds no PEM certificate.");
  std::unique_ptr<BIO, BioCloser> key_in(BIO_new_file(o.key_file.c_str(), "r"));
  if (!key_in) return Bad("--tls_key_file", o.key_file, "cannot be read.");
  std::unique_ptr<EVP_PKEY, KeyFreer> key(PEM_read_bio_PrivateKey(key_in.get(), nullptr, nullptr, nullptr));
  if (!key) return Bad("--tls_key_file", o.key_file, "holds no PEM private key (or it is encrypted).");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return Bad("--tls_key_file", o.key_file, absl::StrCat("is not the key of the certificate in ", o.cert_file, "."));
  }
  if (!o.client_ca_file.empty()) {
    std::unique_ptr<BIO, BioCloser> ca_in(BIO_new_file(o.client_ca_file.c_str(), "r"));
    if (!ca_in) return Bad("--tls_client_ca_file", o.client_ca_file, "cannot be read.");
    std::unique_ptr<X509, X509Freer> ca(PEM_read_bio_X509(ca_in.get(), nullptr, nullptr, nullptr));
    if (!ca) return Bad("--tls_client_ca_file", o.client_ca_file, "holds no PEM certificate.");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& o) {
  if (!o.enabled()) {
    if (!o.key_file.empty() || !o.client_ca_file.empty() || o.require_client_cert) {
      return absl::InvalidArgumentError(
          "--tls_key_file, --tls_client_ca_file and --tls_require_client_cert need --tls_cert_file.");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.key_file.empty()) return absl::InvalidArgumentError("--tls_cert_file needs --tls_key_file.");
  if (o.require_client_cert && o.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_require_client_cert needs --tls_client_ca_file: the CAs client certificates must chain to.");
  }
  if (absl::Status s = CheckKeyAndCertificate(o); !s.ok()) return s;

  const unsigned int refresh = static_cast<unsigned int>(std::max<std::int64_t>(1, o.refresh.count()));
  auto provider = o.client_ca_file.empty()
                      ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(o.key_file, o.cert_file,
                                                                                             refresh)
                      : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                            o.key_file, o.cert_file, o.client_ca_file, refresh);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!o.client_ca_file.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(o.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                                        : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace tally
