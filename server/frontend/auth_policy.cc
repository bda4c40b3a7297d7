#include "server/frontend/auth_policy.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/server_context.h"

namespace tally {
namespace {

constexpr absl::string_view kBearer = "bearer ";

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat(
      why, " Send `authorization: Bearer <token>` metadata with a token the server's --auth_token_file lists",
      " (tally CLI: --token or --token-file)."));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuthPolicy>> AuthPolicy::Create(const AuthOptions& options) {
  std::unique_ptr<AuthPolicy> policy(new AuthPolicy());
  policy->identity_from_client_cert_ = options.identity_from_client_cert;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::unique_ptr<TokenFile>> tokens = TokenFile::Open(options.token_file, options.token_file_recheck);
    if (!tokens.ok()) return tokens.status();
    policy->tokens_ = std::move(*tokens);
  }
  return policy;
}

absl::StatusOr<std::string> AuthPolicy::Authenticate(const grpc::ServerContextBase& context) const {
  if (!enabled()) return std::string(kAnonymous);
  const auto& metadata = context.client_metadata();
  const auto header = metadata.find("authorization");
  if (header != metadata.end()) {
    const absl::string_view value(header->second.data(), header->second.size());
    if (!absl::StartsWithIgnoreCase(value, kBearer)) {
      return Unauthenticated("authorization: only bearer tokens are accepted.");
    }
    if (tokens_ == nullptr) return Unauthenticated("authorization: this server takes no bearer tokens.");
    const absl::string_view token = absl::StripAsciiWhitespace(value.substr(kBearer.size()));
    if (std::optional<std::string> identity = tokens_->Lookup(token)) return *identity;
    return Unauthenticated("authorization: the bearer token is not one the server accepts.");
  }
  if (identity_from_client_cert_) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth != nullptr) {
      for (const grpc::string_ref& cn : auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
        if (cn.size() > 0) return std::string(cn.data(), cn.size());
      }
    }
    return Unauthenticated("the call carries no bearer token and no verified client certificate with a common name.");
  }
  return Unauthenticated("the call carries no bearer token.");
}

}  // namespace tally
