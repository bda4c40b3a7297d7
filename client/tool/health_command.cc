// `tally health`: ask a server whether it is serving (grpc.health.v1).
#include <cstdio>

#include "absl/strings/str_format.h"
#include "absl/strings/str_cat.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "tally/client/client.h"

namespace tally::client::tool {

namespace {

constexpr char kDescription[] = R"(usage: tally health [flags]

Asks a tally server's gRPC health service (grpc.health.v1.Health/Check)
whether it is serving, and prints the status: SERVING, NOT_SERVING (e.g.
draining after SIGTERM), SERVICE_UNKNOWN or UNKNOWN.
)";

constexpr char kNotes[] = R"(Exit status: 0 SERVING; 1 anything else, or no answer; 2 bad flags.

Examples:
  tally health --target=gpu-box:50051 --service=tally.v1.Aggregator
  tally health --target gpu-box:50051 --service cuda:1
)";

struct HealthFlags {
  ConnectionFlags connection;
  std::optional<std::string> service;
  std::optional<absl::Duration> timeout;
};

constexpr absl::Duration kDefaultTimeout = absl::Seconds(5);

}  // namespace

int RunHealth(const std::vector<std::string>& args) {
  HealthFlags f;
  std::unique_ptr<CLI::App> app = MakeCommandApp("tally health", kDescription, kNotes);
  StartGroup(*app, "Flags");
  AddTextFlag(*app, "--service", f.service, "NAME",
              "\"\" (the whole server), tally.v1.Aggregator, or on a GPU server one GPU by its place, cuda:0, "
              "cuda:1, ...: NOT_SERVING once that GPU is lost, while the server serves on the others",
              "\"\"");
  AddSecondsFlag(*app, "--timeout", f.timeout, "give up after this long",
                 absl::StrCat(absl::ToDoubleSeconds(kDefaultTimeout)));
  AddConnectionFlags(*app, f.connection);
  Connection connection;
  const auto check = [&]() -> absl::Status {
    absl::StatusOr<Connection> c = f.connection.Resolve();
    if (!c.ok()) return c.status();
    connection = *std::move(c);
    return absl::OkStatus();
  };
  if (std::optional<int> exit = ParseCommandLine(*app, args, check)) return *exit;
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(connection, "health");
  if (!channel) return kExitFailure;
  Client client(channel);
  const absl::StatusOr<ServingStatus> status = client.CheckHealth(f.service.value_or(""), f.timeout.value_or(kDefaultTimeout));
  if (!status.ok()) {
    absl::FPrintF(stderr, "tally health: %s: %s: %s\n", connection.target,
                  absl::StatusCodeToString(status.status().code()), status.status().message());
    return kExitFailure;
  }
  absl::PrintF("%s\n", ServingStatusName(*status));
  return *status == ServingStatus::kServing ? kExitOk : kExitFailure;
}

}  // namespace tally::client::tool
