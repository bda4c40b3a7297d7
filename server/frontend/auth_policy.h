// Who a call acts as. The one place the front end decides it: every
// Aggregator call passes through Authenticate() before it does anything, and
// the identity it returns is what metrics label and quotas charge.
//
// - No token file and no certificate identity: authentication is off and
//   every call is "anonymous".
// - A bearer token (metadata `authorization: Bearer <token>`) whose SHA-256
//   is in the token file: that line's identity. A token that is there but
//   wrong is refused, whatever else the call carries.
// - With identity_from_client_cert, a call without a token over an mTLS
//   connection acts as the client certificate's subject common name.
// - Anything else is UNAUTHENTICATED.
//
// The health service (and reflection) are not Aggregator calls and never
// come here: kubelets and load balancers ask them without credentials.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/frontend/token_file.h"

namespace grpc {
class ServerContextBase;
}

namespace tally {

struct AuthOptions {
  std::string token_file;  // empty: no bearer tokens
  bool identity_from_client_cert = false;
  std::chrono::milliseconds token_file_recheck{1000};
};

class AuthPolicy {
 public:
  // The identity of every call while authentication is off.
  static constexpr char kAnonymous[] = "anonymous";

  // Fails when the token file cannot be used (see TokenFile::Open).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AuthPolicy>> Create(const AuthOptions& options);

  bool enabled() const { return tokens_ != nullptr || identity_from_client_cert_; }
  [[nodiscard]] absl::StatusOr<std::string> Authenticate(const grpc::ServerContextBase& context) const;

 private:
  AuthPolicy() = default;
  std::unique_ptr<TokenFile> tokens_;
  bool identity_from_client_cert_ = false;
};

}  // namespace tally
