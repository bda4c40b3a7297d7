// The gRPC port's credentials: plaintext, TLS, or mutual TLS. Certificates
// come from files that gRPC's FileWatcherCertificateProvider re-reads every
// `refresh` (a changed key and certificate are used for new connections;
// connections already open keep theirs), so cert-manager's rotation of a
// Secret volume needs no restart.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ServerCredentials;
}

namespace tally {

struct TlsOptions {
  std::string cert_file;       // PEM certificate chain, leaf first; empty: plaintext
  std::string key_file;        // PEM private key of the leaf
  std::string client_ca_file;  // PEM CAs that client certificates must chain to; empty: none asked for
  // Refuse the handshake of a client without a certificate signed by
  // client_ca_file. Without it, a client certificate is verified when sent.
  bool require_client_cert = false;
  // How often the files are looked at for changes (gRPC's minimum is 1 s).
  std::chrono::seconds refresh{60};

  bool enabled() const { return !cert_file.empty(); }
};

// Checks that the files exist and agree (the key is the certificate's) and
// builds the credentials; INVALID_ARGUMENT naming the flag otherwise.
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

}  // namespace tally
