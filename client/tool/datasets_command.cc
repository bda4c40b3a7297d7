// `tally datasets` (list or describe the resident datasets) and `tally rm`
// (remove them).
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "command_line.h"
#include "connection_flags.h"
#include "commands.h"
#include "tally/client/client.h"
#include "tally/client/format.h"

namespace tally::client::tool {

const absl::string_view kDatasetsUsage = R"(usage: tally datasets [flags] [NAME...]

Lists the resident datasets of a tally server (see tally put): name, dtype,
shape (its length in elements, or ROWSxROW_LENGTH for a dataset uploaded in
rows), bytes, place (cuda:N for a GPU, host for host memory),
version (every upload gets a new one), expiry (TTL) and how many queries
have read it; then, per place, the datasets and bytes it holds and the
server's limit (--max_dataset_bytes; "none" without one). With NAMEs, shows
only those datasets (one line each).

Expiry times are the server's, shown against this machine's clock.

Flags:
  --timeout=SECONDS   give up after this long (default 30)
  --json              print JSON instead of text:
                        {"datasets":[{"name":..,"dtype":"float32","length":N,
                          "bytes":N,"place":"host","version":N,
                          "created_unix_seconds":S,"expires_unix_seconds":S,
                          "queries":N,"shards":N,"row_length":N}],
                         "places":[{"place":"host","datasets":N,"bytes":N,
                          "limit_bytes":N}]}
                      expires_unix_seconds and limit_bytes are 0 for none;
                      with NAMEs there is no "places"

Exit status: 0 success; 1 the request failed, or a NAME is unknown
(NOT_FOUND; the others are still shown); 2 bad flags.

Examples:
  tally datasets
  tally datasets --target=gpu-box:50051 --json
  tally datasets temps
)";

const absl::string_view kRmUsage = R"(usage: tally rm [flags] NAME...

Removes resident datasets from a tally server. The names are gone at once;
queries already reading a dataset finish on it, and its memory is freed when
the last of them ends. Prints each removed dataset.

Flags:
  --timeout=SECONDS   give up after this long, per name (default 30)

Exit status: 0 every NAME was removed; 1 a removal failed (an unknown name
is NOT_FOUND; the server's status code and message are printed on stderr and
the other names are still removed); 2 bad flags.

Example:
  tally rm temps scratch
)";

namespace {

// The flags both commands take.
struct Common {
  Connection connection;
  // Listing and removing are small calls; a server that does not answer
  // them in this long is not going to.
  absl::Duration timeout = absl::Seconds(30);
  bool json = false;
};

absl::StatusOr<Common> TakeCommon(CommandLine& cl, bool takes_json) {
  Common c;
  if (absl::Status s = TakeConnectionFlags(cl, c.connection); !s.ok()) return s;
  absl::StatusOr<std::optional<absl::Duration>> timeout = cl.TakeSeconds("timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) c.timeout = **timeout;
  if (takes_json) {
    absl::StatusOr<bool> json = cl.TakeBool("json");
    if (!json.ok()) return json.status();
    c.json = *json;
  }
  if (absl::Status s = cl.CheckAllUsed(); !s.ok()) return s;
  return c;
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
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  absl::StatusOr<Common> c = cl.ok() ? TakeCommon(*cl, /*takes_json=*/true) : cl.status();
  if (!c.ok()) {
    absl::FPrintF(stderr, "tally datasets: %s\n(see tally datasets --help)\n", c.status().message());
    return kExitUsage;
  }
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(c->connection, "datasets");
  if (!channel) return kExitFailure;
  Client client(channel);
  if (!cl->positional().empty()) return Describe(client, *c, cl->positional());
  absl::StatusOr<v1::ListDatasetsResponse> list = client.ListDatasets(c->timeout);
  if (!list.ok()) {
    PrintFailure("datasets", c->connection.target, list.status());
    return kExitFailure;
  }
  const std::string text = c->json ? FormatDatasetsJson(*list) : FormatDatasetsText(*list, absl::Now());
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

int RunRm(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  absl::StatusOr<Common> c = cl.ok() ? TakeCommon(*cl, /*takes_json=*/false) : cl.status();
  if (c.ok() && cl->positional().empty()) c = absl::InvalidArgumentError("give the NAME of a dataset to remove");
  if (!c.ok()) {
    absl::FPrintF(stderr, "tally rm: %s\n(see tally rm --help)\n", c.status().message());
    return kExitUsage;
  }
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(c->connection, "rm");
  if (!channel) return kExitFailure;
  Client client(channel);
  int exit = kExitOk;
  for (const std::string& name : cl->positional()) {
    absl::StatusOr<v1::DatasetInfo> removed = client.DeleteDataset(name, c->timeout);
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
