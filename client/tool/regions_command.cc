// `tally regions`: list a server's shared-memory regions, or unregister some.
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "tally/client/client.h"

namespace tally::client::tool {

namespace {

constexpr char kDescription[] = R"(usage: tally regions [flags]
       tally regions --unregister=NAME[,NAME...] [flags]

Lists the shared-memory regions registered with a tally server (tally
aggregate --shm and the SharedMemory calls register them): name, kind
(host: a /dev/shm object, with its name and offset; cuda: GPU memory of
another process), bytes, place (pinned host, host, cuda:N) and the queries
that read it; then the registered bytes against the server's limit
(--max_region_bytes). With --unregister, removes those regions instead:
queries reading one finish on it, and it is unmapped after them.
)";

constexpr char kNotes[] = R"(Exit status: 0 success; 1 a call failed (an unknown name is NOT_FOUND; the
server's status code and message are printed on stderr); 2 bad flags.

Examples:
  tally regions
  tally regions --unregister=tally-4242-0-array
)";

constexpr absl::Duration kDefaultTimeout = absl::Seconds(30);

std::string Describe(const v1::RegionInfo& r) {
  const std::string where = r.kind() == v1::RegionInfo::KIND_HOST
                                ? absl::StrCat("host ", r.shm_name(), " from byte ", r.offset())
                                : absl::StrCat("cuda device ", r.device());
  return absl::StrFormat("%-32s %-40s %14d bytes  %-11s %d queries", r.name(), where, r.byte_size(), r.place(),
                         r.queries());
}

}  // namespace

int RunRegions(const std::vector<std::string>& args) {
  ConnectionFlags connection_flags;
  std::optional<absl::Duration> timeout_flag;
  std::optional<std::string> unregister;
  std::unique_ptr<CLI::App> app = MakeCommandApp("tally regions", kDescription, kNotes);
  StartGroup(*app, "Flags");
  AddTextFlag(*app, "--unregister", unregister, "NAMES", "regions to unregister, comma-separated");
  AddSecondsFlag(*app, "--timeout", timeout_flag, "give up after this long",
                 absl::StrCat(absl::ToDoubleSeconds(kDefaultTimeout)));
  AddConnectionFlags(*app, connection_flags);
  Connection connection;
  const auto check = [&]() -> absl::Status {
    if (unregister && unregister->empty()) return absl::InvalidArgumentError("--unregister: no name");
    absl::StatusOr<Connection> c = connection_flags.Resolve();
    if (!c.ok()) return c.status();
    connection = *std::move(c);
    return absl::OkStatus();
  };
  if (std::optional<int> exit = ParseCommandLine(*app, args, check)) return *exit;
  const absl::Duration timeout = timeout_flag.value_or(kDefaultTimeout);
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(connection, "regions");
  if (!channel) return kExitFailure;
  Client client(channel);
  if (unregister) {
    int exit = kExitOk;
    for (absl::string_view name : absl::StrSplit(*unregister, ',')) {
      absl::StatusOr<v1::RegionInfo> gone = client.UnregisterRegion(name, timeout);
      if (!gone.ok()) {
        absl::FPrintF(stderr, "tally regions: %s: %s: %s\n", name, absl::StatusCodeToString(gone.status().code()),
                      gone.status().message());
        exit = kExitFailure;
        continue;
      }
      absl::PrintF("unregistered %s\n", Describe(*gone));
    }
    return exit;
  }
  absl::StatusOr<v1::ListRegionsResponse> list = client.ListRegions(timeout);
  if (!list.ok()) {
    absl::FPrintF(stderr, "tally regions: %s: %s: %s\n", connection.target,
                  absl::StatusCodeToString(list.status().code()), list.status().message());
    return kExitFailure;
  }
  for (const v1::RegionInfo& r : list->regions()) absl::PrintF("%s\n", Describe(r));
  absl::PrintF("%d region%s, %d bytes registered (limit %s)\n", list->regions_size(),
               list->regions_size() == 1 ? "" : "s", list->registered_bytes(),
               list->limit_bytes() == 0 ? std::string("none") : absl::StrCat(list->limit_bytes(), " bytes"));
  return kExitOk;
}

}  // namespace tally::client::tool
