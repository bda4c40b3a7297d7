// `tally datasets` (list or describe the resident datasets) and `tally rm`
// (remove them).
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "tally/client/client.h"
#include "tally/client/format.h"

namespace tally::client::tool {

namespace {

constexpr char kDatasetsDescription[] = R"(usage: tally datasets [flags] [NAME...]

Lists the resident datasets of a tally server (see tally put): name, dtype,
shape (its length in elements, or ROWSxROW_LENGTH for a dataset uploaded in
rows), bytes, place (cuda:N for a GPU, host for host memory),
version (every upload gets a new one), expiry (TTL) and how many queries
have read it; then, per place, the datasets and bytes it holds and the
server's limit (--max_dataset_bytes; "none" without one). With NAMEs, shows
only those datasets (one line each).

Expiry times are the server's, shown against this machine's clock.
)";

constexpr char kDatasetsNotes[] = R"(JSON (--json):
  {"datasets":[{"name":..,"dtype":"float32","length":N,"bytes":N,
    "place":"host","version":N,"created_unix_seconds":S,
    "expires_unix_seconds":S,"queries":N,"shards":N,"row_length":N}],
   "places":[{"place":"host","datasets":N,"bytes":N,"limit_bytes":N}]}
  expires_unix_seconds and limit_bytes are 0 for none; with NAMEs there is
  no "places"

Exit status: 0 success; 1 the request failed, or a NAME is unknown
(NOT_FOUND; the others are still shown); 2 bad flags.

Examples:
  tally datasets
  tally datasets --target=gpu-box:50051 --json
  tally datasets temps
)";

constexpr char kRmDescription[] = R"(usage: tally rm [flags] NAME...

Removes resident datasets from a tally server. The names are gone at once;
queries already reading a dataset finish on it, and its memory is freed when
the last of them ends. Prints each removed dataset.
)";

constexpr char kRmNotes[] = R"(Exit status: 0 every NAME was removed; 1 a removal failed (an unknown name
is NOT_FOUND; the server's status code and message are printed on stderr and
the other names are still removed); 2 bad flags.

Example:
  tally rm temps scratch
)";

// The flags both commands take, as given.
struct CommonFlags {
  ConnectionFlags connection;
  std::vector<std::string> names;
  std::optional<absl::Duration> timeout;
  bool json = false;
};

// Listing and removing are small calls; a server that does not answer them
// in this long is not going to.
constexpr absl::Duration kDefaultTimeout = absl::Seconds(30);

std::unique_ptr<CLI::App> MakeApp(const std::string& name, const std::string& description,
                                  const std::string& notes, bool takes_json, CommonFlags& f) {
  std::unique_ptr<CLI::App> app = MakeCommandApp(name, description, notes);
  StartGroup(*app, "Arguments");
  AddArguments(*app, "NAME", f.names, takes_json ? "datasets to describe (default: all)" : "datasets to remove");
  StartGroup(*app, "Flags");
  AddSecondsFlag(*app, "--timeout", f.timeout, takes_json ? "give up after this long" : "give up after this long, per name",
                 absl::StrCat(absl::ToDoubleSeconds(kDefaultTimeout)));
  if (takes_json) AddSwitch(*app, "--json", f.json, "print JSON instead of text (format below)");
  AddConnectionFlags(*app, f.connection);
  return app;
}

struct Common {
  Connection connection;
  absl::Duration timeout = kDefaultTimeout;
  bool json = false;
};

absl::Status Check(const CommonFlags& f, Common& c) {
  absl::StatusOr<Connection> connection = f.connection.Resolve();
  if (!connection.ok()) return connection.status();
  c.connection = *std::move(connection);
  if (f.timeout) c.timeout = *f.timeout;
  c.json = f.json;
  return absl::OkStatus();
}

void PrintFailure(absl::string_view command, absl::string_view what, const absl::Status& s) {
  absl::FPrintF(stderr, "tally %s: %s: %s: %s\n", command, what,
                absl::StatusCodeToString(s.code()), s.message());
}

int Describe(Client& client, const Common& c, const std::vector<std::string>& names) {
  int exit = kExitOk;
  std::vector<std::string> json;
  for (const std::string& name : names) {
    absl::StatusOr<v1::DatasetInfo> info = client.DescribeDataset(name, c.timeout);
    if (!info.ok()) {
      PrintFailure("datasets", name, info.status());
      exit = kExitFailure;
      continue;
    }
    if (c.json) {
      json.push_back(DatasetJson(*info));
    } else {
      absl::PrintF("%s\n", FormatDatasetText(*info, absl::Now()));
    }
  }
  if (c.json) absl::PrintF("{\"datasets\":[%s]}\n", absl::StrJoin(json, ",\n  "));
  return exit;
}

}  // namespace

int RunDatasets(const std::vector<std::string>& args) {
  CommonFlags flags;
  std::unique_ptr<CLI::App> app = MakeApp("tally datasets", kDatasetsDescription, kDatasetsNotes, true, flags);
  Common c;
  if (std::optional<int> exit = ParseCommandLine(*app, args, [&] { return Check(flags, c); })) return *exit;
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(c.connection, "datasets");
  if (!channel) return kExitFailure;
  Client client(channel);
  if (!flags.names.empty()) return Describe(client, c, flags.names);
  absl::StatusOr<v1::ListDatasetsResponse> list = client.ListDatasets(c.timeout);
  if (!list.ok()) {
    PrintFailure("datasets", c.connection.target, list.status());
    return kExitFailure;
  }
  const std::string text = c.json ? FormatDatasetsJson(*list) : FormatDatasetsText(*list, absl::Now());
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

int RunRm(const std::vector<std::string>& args) {
  CommonFlags flags;
  std::unique_ptr<CLI::App> app = MakeApp("tally rm", kRmDescription, kRmNotes, false, flags);
  Common c;
  const auto check = [&]() -> absl::Status {
    if (flags.names.empty()) return absl::InvalidArgumentError("give the NAME of a dataset to remove");
    return Check(flags, c);
  };
  if (std::optional<int> exit = ParseCommandLine(*app, args, check)) return *exit;
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(c.connection, "rm");
  if (!channel) return kExitFailure;
  Client client(channel);
  int exit = kExitOk;
  for (const std::string& name : flags.names) {
    absl::StatusOr<v1::DatasetInfo> removed = client.DeleteDataset(name, c.timeout);
    if (!removed.ok()) {
      PrintFailure("rm", name, removed.status());
      exit = kExitFailure;
      continue;
    }
    absl::PrintF("removed %s\n", FormatDatasetText(*removed, absl::Now()));
  }
  return exit;
}

}  // namespace tally::client::tool
