// `tally put`: upload an array as a resident dataset and print what the
// server now holds.
#include <cstdio>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "command_line.h"
#include "connection_flags.h"
#include "commands.h"
#include "input_flags.h"
#include "progress_bar.h"
#include "tally/client/client.h"
#include "tally/client/format.h"
#include "tally/client/input.h"
#include "tally/client/number_text.h"
#include "tally/client/sizes.h"

namespace tally::client::tool {

const absl::string_view kPutUsage = R"(usage: tally put [flags] NAME (FILE.npy | --raw=FILE --dtype=T | --random=N)

Uploads an array to a tally server as the resident dataset NAME, to be
aggregated any number of times with `tally aggregate --dataset=NAME` without
sending it again. The server keeps it in GPU memory (cuda backend) or host
memory (cpu backend) until it is removed (tally rm), replaced, expires or,
on a server run with --dataset_evict_lru, is evicted. Prints the dataset as
the server describes it.

NAME is 1 to 256 printable ASCII characters.

Input (exactly one):
  FILE.npy            a numpy .npy file (format 1.0-3.0, C order, 1-D or 2-D;
                      dtypes float16 float32 float64 int8 int16 int32 int64
                      uint8 uint16 uint32 uint64 bool). A 2-D
                      array keeps its rows: queries of the dataset answer per
                      row unless they give --rows themselves (--rows=0 for
                      one answer over every element). The file is mapped,
                      not read.
  --raw=FILE          raw little-endian elements of --dtype (mapped, not read)
  --random=N          N random elements of --dtype (K/M/G suffixes allowed):
                      floats uniform in [-1, 1), integers spread over a range

Flags:
  --dtype=T           float16 bfloat16 float32 float64 int8 int16 int32 int64
                      uint8 uint16 uint32 uint64 bool: required
                      with --raw; for --random (default float32)
  --seed=S            seed for --random (default 1)
  --replace           replace a dataset of the same name (atomically: queries
                      already running finish on the old version); without
                      it an existing name fails with ALREADY_EXISTS
  --ttl=SECONDS       the server removes the dataset this long after the
                      upload completes (default: it stays until removed)
  --chunk=BYTES       bytes per streamed message (default 4M)
  --timeout=SECONDS   give up after this long (default: no limit)
  --json              print JSON instead of text:
                        {"dataset":{"name":..,"dtype":..,"length":N,"bytes":N,
                         "place":"host","version":N,"created_unix_seconds":S,
                         "expires_unix_seconds":S,"queries":N,"shards":N,
                         "row_length":N},
                         "row_length":N,"server_seconds":S,"client_seconds":S}
                      row_length: the 2-D file's row length, 0 for 1-D input

A progress bar appears on stderr when it is a terminal and the upload takes
over a second.

Exit status: 0 success; 1 the upload failed (the server's status code and
message are printed on stderr: ALREADY_EXISTS for a name in use without
--replace, RESOURCE_EXHAUSTED when it does not fit under the server's
--max_dataset_bytes, INVALID_ARGUMENT for a bad name) or the input could not
be read; 2 bad flags.

Examples:
  tally put temps temps.npy
  tally put temps temps_v2.npy --replace --ttl=3600
  tally put --raw=/data/x.f64 --dtype=float64 x
  tally put --random=1G scratch
)";

namespace {

struct PutArgs {
  Connection connection;
  std::string name;
  InputSpec input;
  PutOptions put;
  bool json = false;
};

absl::StatusOr<PutArgs> ParseArgs(CommandLine& cl) {
  PutArgs a;
  if (absl::Status s = TakeConnectionFlags(cl, a.connection); !s.ok()) return s;
  if (cl.positional().empty()) return absl::InvalidArgumentError("give the dataset's NAME");
  a.name = cl.positional()[0];
  if (a.name.empty()) return absl::InvalidArgumentError("NAME is empty");
  const std::vector<std::string> files(cl.positional().begin() + 1, cl.positional().end());
  absl::StatusOr<InputSpec> input = TakeInputFlags(cl, files);
  if (!input.ok()) return input.status();
  if (!input->given()) {
    return absl::InvalidArgumentError(
        "give exactly one input after NAME: FILE.npy, --raw=FILE --dtype=T or --random=N");
  }
  a.input = *std::move(input);
  absl::StatusOr<bool> replace = cl.TakeBool("replace");
  if (!replace.ok()) return replace.status();
  a.put.replace = *replace;
  absl::StatusOr<std::optional<absl::Duration>> ttl = cl.TakeSeconds("ttl");
  if (!ttl.ok()) return ttl.status();
  if (*ttl) a.put.ttl = **ttl;
  absl::StatusOr<std::optional<std::uint64_t>> chunk = cl.TakeSize("chunk");
  if (!chunk.ok()) return chunk.status();
  if (*chunk) a.put.chunk_bytes = **chunk;
  absl::StatusOr<std::optional<absl::Duration>> timeout = cl.TakeSeconds("timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) a.put.timeout = **timeout;
  absl::StatusOr<bool> json = cl.TakeBool("json");
  if (!json.ok()) return json.status();
  a.json = *json;
  if (absl::Status s = cl.CheckAllUsed(); !s.ok()) return s;
  return a;
}

std::string Seconds(double s) { return absl::StrFormat("%.3f s", s); }

}  // namespace

int RunPut(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  absl::StatusOr<PutArgs> a = cl.ok() ? ParseArgs(*cl) : cl.status();
  if (!a.ok()) {
    absl::FPrintF(stderr, "tally put: %s\n(see tally put --help)\n", a.status().message());
    return kExitUsage;
  }
  absl::StatusOr<InputArray> input = LoadInput(a->input);
  if (!input.ok()) {
    absl::FPrintF(stderr, "tally put: %s\n", input.status().message());
    return kExitFailure;
  }
  const ArrayRef& array = input->array();

  std::shared_ptr<grpc::Channel> channel = OpenOrReport(a->connection, "put");
  if (!channel) return kExitFailure;
  Client client(channel);
  ProgressBar progress;
  a->put.progress = [&progress](std::uint64_t sent, std::uint64_t total) {
    progress.Update(sent, total);
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::PutDatasetResponse> response = client.PutDataset(a->name, array, a->put);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  progress.Finish();
  if (!response.ok()) {
    absl::FPrintF(stderr, "tally put: %s from %s failed: %s: %s\n", a->name, input->description(),
                  absl::StatusCodeToString(response.status().code()), response.status().message());
    return kExitFailure;
  }

  const std::uint64_t row_length = array.row_length;
  if (a->json) {
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
