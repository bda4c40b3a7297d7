// `tally put`: upload an array as a resident dataset and print what the
// server now holds.
#include <cstdio>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "help_formatter.h"
#include "input_flags.h"
#include "progress_bar.h"
#include "tally/client/client.h"
#include "tally/client/format.h"
#include "tally/client/input.h"
#include "tally/client/number_text.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {

namespace {

constexpr char kDescription[] = R"(usage: tally put [flags] NAME (FILE.npy | --raw=FILE --dtype=T | --random=N)

Uploads an array to a tally server as the resident dataset NAME, to be
aggregated any number of times with `tally aggregate --dataset=NAME` without
sending it again. The server keeps it in GPU memory (cuda backend) or host
memory (cpu backend) until it is removed (tally rm), replaced, expires or,
on a server run with --dataset_evict_lru, is evicted. Prints the dataset as
the server describes it. Every flag takes its value as --name=value or
--name value.
)";

constexpr char kNotesTail[] = R"(
A progress bar appears on stderr when it is a terminal and generating
--random data, or the upload, takes over a second.

JSON (--json):
  {"dataset":{"name":..,"dtype":..,"length":N,"bytes":N,"place":"host",
   "version":N,"created_unix_seconds":S,"expires_unix_seconds":S,
   "queries":N,"shards":N,"row_length":N},
   "row_length":N,"server_seconds":S,"client_seconds":S}
  row_length: the 2-D file's row length, 0 for 1-D input

Exit status: 0 success; 1 the upload failed (the server's status code and
message are printed on stderr: ALREADY_EXISTS for a name in use without
--replace, RESOURCE_EXHAUSTED when it does not fit under the server's
--max_dataset_bytes, INVALID_ARGUMENT for a bad name) or the input could not
be read; 2 bad flags.

Examples:
  tally put temps temps.npy
  tally put temps temps_v2.npy --replace --ttl 3600
  tally put --raw=/data/x.f64 --dtype=float64 x
  tally put --random=1G scratch
)";

struct PutFlags {
  ConnectionFlags connection;
  std::string name;
  std::vector<std::string> files;
  InputFlags input;
  bool replace = false, json = false;
  std::optional<absl::Duration> ttl, timeout;
  std::optional<std::uint64_t> chunk;
};

std::unique_ptr<CLI::App> MakeApp(PutFlags& f) {
  std::unique_ptr<CLI::App> app = MakeCommandApp(
      "tally put", kDescription, absl::StrCat(WrapText(std::string(kSizeSuffixHelp), 0, 78), "\n", kNotesTail));
  StartGroup(*app, "Arguments");
  app->add_option("NAME", f.name, "the dataset's name: 1 to 256 printable ASCII characters");
  StartGroup(*app, "Input (exactly one of FILE.npy, --raw and --random)");
  AddArguments(*app, "FILE.npy", f.files,
               "a numpy .npy file (format 1.0-3.0, C order, 1-D or 2-D; dtypes float16 float32 float64 int8 int16 "
               "int32 int64 uint8 uint16 uint32 uint64 bool). A 2-D array keeps its rows: queries of the "
               "dataset answer per row unless they give --rows themselves (--rows=0 for one answer over every "
               "element). The file is mapped, not read.");
  AddInputFlags(*app, f.input);
  StartGroup(*app, "Flags");
  AddSwitch(*app, "--replace", f.replace,
            "replace a dataset of the same name (atomically: queries already running finish on the old "
            "version); without it an existing name fails with ALREADY_EXISTS");
  AddSecondsFlag(*app, "--ttl", f.ttl, "the server removes the dataset this long after the upload completes",
                 "none: it stays until removed");
  AddSizeFlag(*app, "--chunk", f.chunk, "BYTES", "bytes per streamed message", SizeText(PutOptions{}.chunk_bytes));
  AddSecondsFlag(*app, "--timeout", f.timeout, "give up after this long", "no limit");
  AddSwitch(*app, "--json", f.json, "print JSON instead of text (format below)");
  AddConnectionFlags(*app, f.connection);
  return app;
}

struct PutArgs {
  Connection connection;
  std::string name;
  InputSpec input;
  PutOptions put;
  bool json = false;
};

absl::Status Check(const PutFlags& f, PutArgs& a) {
  absl::StatusOr<Connection> connection = f.connection.Resolve();
  if (!connection.ok()) return connection.status();
  a.connection = *std::move(connection);
  if (f.name.empty()) return absl::InvalidArgumentError("give the dataset's NAME");
  a.name = f.name;
  absl::StatusOr<InputSpec> input = f.input.Resolve(f.files);
  if (!input.ok()) return input.status();
  if (!input->given()) {
    return absl::InvalidArgumentError(
        "give exactly one input after NAME: FILE.npy, --raw=FILE --dtype=T or --random=N");
  }
  a.input = *std::move(input);
  a.put.replace = f.replace;
  if (f.ttl) a.put.ttl = *f.ttl;
  if (f.chunk) a.put.chunk_bytes = *f.chunk;
  if (f.timeout) a.put.timeout = *f.timeout;
  a.json = f.json;
  return absl::OkStatus();
}

std::string Seconds(double s) { return absl::StrFormat("%.3f s", s); }

}  // namespace

int RunPut(const std::vector<std::string>& args) {
  PutFlags flags;
  std::unique_ptr<CLI::App> app = MakeApp(flags);
  PutArgs a;
  if (std::optional<int> exit = ParseCommandLine(*app, args, [&] { return Check(flags, a); })) return *exit;
  absl::StatusOr<InputArray> input = LoadInput(a.input);
  if (!input.ok()) {
    absl::FPrintF(stderr, "tally put: %s\n", input.status().message());
    return kExitFailure;
  }
  const ArrayRef& array = input->array();

  std::shared_ptr<grpc::Channel> channel = OpenOrReport(a.connection, "put");
  if (!channel) return kExitFailure;
  Client client(channel);
  ProgressBar progress;
  a.put.progress = [&progress](std::uint64_t sent, std::uint64_t total) {
    progress.Update(sent, total);
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::PutDatasetResponse> response = client.PutDataset(a.name, array, a.put);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  progress.Finish();
  if (!response.ok()) {
    absl::FPrintF(stderr, "tally put: %s from %s failed: %s: %s\n", a.name, input->description(),
                  absl::StatusCodeToString(response.status().code()), response.status().message());
    return kExitFailure;
  }

  const std::uint64_t row_length = array.row_length;
  if (a.json) {
    absl::PrintF("{\"dataset\":%s,\"row_length\":%d,\"server_seconds\":%s,\"client_seconds\":%s}\n",
                 DatasetJson(response->dataset()), row_length,
                 DoubleText(response->server_seconds()), DoubleText(seconds));
    return kExitOk;
  }
  absl::PrintF("%s\n", FormatDatasetText(response->dataset(), absl::Now()));
  absl::PrintF("uploaded %s in %s (%.3f GB/s); server %s\n", FormatBytes(array.size_bytes()),
               Seconds(seconds), seconds > 0 ? array.size_bytes() / seconds / 1e9 : 0.0,
               Seconds(response->server_seconds()));
  return kExitOk;
}

}  // namespace tally::client::tool
