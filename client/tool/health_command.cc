// `tally health`: ask a server whether it is serving (grpc.health.v1).
#include <cstdio>

#include "absl/strings/str_format.h"
#include "command_line.h"
#include "connection_flags.h"
#include "commands.h"
#include "tally/client/client.h"

namespace tally::client::tool {

const absl::string_view kHealthUsage = R"(usage: tally health [flags]

Asks a tally server's gRPC health service (grpc.health.v1.Health/Check)
whether it is serving, and prints the status: SERVING, NOT_SERVING (e.g.
draining after SIGTERM), SERVICE_UNKNOWN or UNKNOWN.

Flags:
  --service=NAME      "" (default: the whole server), tally.v1.Aggregator,
                      or on a GPU server one GPU by its place, cuda:0, cuda:1,
                      ...: NOT_SERVING once that GPU is lost, while the
                      server serves on the others
  --timeout=SECONDS   give up after this long (default 5)

Exit status: 0 SERVING; 1 anything else, or no answer; 2 bad flags.

Examples:
  tally health --target=gpu-box:50051 --service=tally.v1.Aggregator
  tally health --target=gpu-box:50051 --service=cuda:1
)";

int RunHealth(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  Connection connection;
  std::string service;
  absl::Duration timeout = absl::Seconds(5);
  absl::Status parsed = cl.status();
  if (parsed.ok()) {
    parsed = TakeConnectionFlags(*cl, connection);
    if (auto s = cl->TakeString("service")) service = *s;
    absl::StatusOr<std::optional<absl::Duration>> d = cl->TakeSeconds("timeout");
    if (d.ok() && *d) timeout = **d;
    if (parsed.ok()) parsed = d.ok() ? cl->CheckAllUsed() : d.status();
    if (parsed.ok() && !cl->positional().empty()) {
      parsed = absl::InvalidArgumentError("tally health takes no arguments");
    }
  }
  if (!parsed.ok()) {
    absl::FPrintF(stderr, "tally health: %s\n(see tally health --help)\n", parsed.message());
    return kExitUsage;
  }
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(connection, "health");
  if (!channel) return kExitFailure;
  Client client(channel);
  const absl::StatusOr<ServingStatus> status = client.CheckHealth(service, timeout);
  if (!status.ok()) {
    absl::FPrintF(stderr, "tally health: %s: %s: %s\n", connection.target,
                  absl::StatusCodeToString(status.status().code()), status.status().message());
    return kExitFailure;
  }
  absl::PrintF("%s\n", ServingStatusName(*status));
  return *status == ServingStatus::kServing ? kExitOk : kExitFailure;
}

}  // namespace tally::client::tool
