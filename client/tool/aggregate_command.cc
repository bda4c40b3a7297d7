// `tally aggregate`: send one array, or name a resident dataset, and print
// the results.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "command_line.h"
#include "connection_flags.h"
#include "commands.h"
#include "input_flags.h"
#include "progress_bar.h"
#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/element_range.h"
#include "tally/client/format.h"
#include "tally/client/input.h"
#include "tally/client/shared_array.h"
#include "tally/rules/dtype.h"

namespace tally::client::tool {

namespace {

constexpr absl::string_view kUsageHead = R"(usage: tally aggregate [flags] (FILE.npy | --raw=FILE --dtype=T | --random=N)
       tally aggregate [flags] --dataset=NAME [--range=A:B] [--rows=N | --offsets=FILE.npy] [--valid=FILE.npy]
       tally aggregate [flags] --shm (FILE.npy | --raw=FILE --dtype=T | --random=N)

Sends one array to a tally server, or names a dataset already resident there
(see tally put), and prints the aggregations it computed.

Input (exactly one):
  FILE.npy            a numpy .npy file (format 1.0-3.0, C order, 1-D or 2-D;
                      dtypes float16 float32 float64 int8 int16 int32 int64
                      uint8 uint16 uint32 uint64 bool); a 2-D
                      array is aggregated per row. The file is mapped, not read.
  --raw=FILE          raw little-endian elements of --dtype (mapped, not read)
  --random=N          N random elements of --dtype (K/M/G suffixes allowed):
                      floats uniform in [-1, 1), integers spread over a range
  --dataset=NAME      a resident dataset: nothing is sent but the query

  --shm               on the server's host: copy the array into a shared-memory
                      object in /dev/shm, register it with the server as a host
                      region, aggregate it there (AggregateRegion: the bytes are
                      not sent), then unregister it and remove the object

Flags:
  --ops=LIST          aggregations, comma-separated (default sum,min,max,mean,count):
)";
// Then the ops, from the registry of aggregate functions (OpsHelp).
constexpr absl::string_view kUsageTail = R"(  --dtype=T           float16 bfloat16 float32 float64 int8 int16 int32 int64
                      uint8 uint16 uint32 uint64 bool: required
                      with --raw; for --random (default float32); a .npy
                      file names its own
  --seed=S            seed for --random (default 1)
  --rows=N            aggregate rows of N elements each (one result per row);
                      must divide the length (of the range, with --dataset).
                      A 2-D .npy file sets it; with --dataset, the rows the
                      dataset was uploaded with, if any (--rows=0: one
                      result over every element).
  --offsets=FILE.npy  aggregate variable-length segments instead (one result
                      per segment): a 1-D .npy of integers, segments + 1
                      entries, 0 first, never decreasing, the array's (or
                      the range's) length last; segment s is elements
                      offsets[s] to offsets[s+1]-1. Empty segments give the
                      empty array's answers (sum 0, mean NaN); min, max,
                      minmax, argmin, argmax, ptp and their nan forms are
                      refused for one.
  --valid=FILE.npy    skip missing elements: a 1-D .npy of bool (or
                      integers: nonzero is valid) as long as the array (or
                      the range); every op reads only the elements marked
                      True, as numpy does on x[valid] (argmin/argmax still
                      count every element). It is sent as a bitmap, one bit
                      per element. A row with no valid elements gives the
                      empty array's answers; min, max, minmax, argmin,
                      argmax, ptp and their nan forms are refused for one.
  --range=A:B         with --dataset: only elements A to B-1 (A: from A to
                      the end; :B from 0). Indices may take K/M/G suffixes;
                      argmin/argmax then count from A, as if the range were
                      the array sent. Default: the whole dataset.
  --json              print JSON instead of text (schema below)
  --full              text: print every row and every histogram count
  --timeout=SECONDS   give up after this long (default: no limit)
  --stream=MODE       auto (default): unary below --stream-threshold, else
                      AggregateStream; always; never
  --stream-threshold=BYTES  default 4M
  --chunk=BYTES       AggregateStream chunk size (default 4M)

A progress bar appears on stderr when it is a terminal and the upload takes
over a second.

JSON: {"results":[{"op":"sum","type":"float64","values":[...]},
                  {"op":"variance","ddof":1,"type":"float64","values":[...]},
                  {"op":"histogram","bins":B,"lo":L,"hi":H,
                   "histograms":[{"counts":[...],"below":0,"above":0,"nan":0}]}],
       "execution":{"elements":N,"bytes":N,"rows":N,"backend":"cpu","device":"...",
                    "server_seconds":S,"client_seconds":S,"transport":"unary"}}
  one "values"/"histograms" entry per row (two values for minmax: min, then
  max); "ddof" for variance, stddev, nanvar and nanstd; integers exact; NaN
  and infinities as the strings "nan", "inf", "-inf". "transport" is
  "unary", "stream" or, with --dataset, "dataset"; with --shm, "shm".

Exit status: 0 success; 1 the request failed (the server's status code and
message are printed on stderr: NOT_FOUND for an unknown dataset,
INVALID_ARGUMENT for a range outside it) or the input could not be read;
2 bad flags.

Examples:
  tally aggregate data.npy --ops=sum,mean,std:1
  tally aggregate --random=1G --dtype=float64 --ops=min,max,hist:100:-1:1
  tally aggregate --raw=/data/x.f32 --dtype=float32 --rows=1024 --json
  tally aggregate --target=gpu-box:50051 big.npy --stream=always --timeout=60
  tally aggregate --dataset=temps --range=1M:2M --ops=mean,hist:64:-40:60
  tally aggregate values.npy --offsets=group_starts.npy --ops=sum,mean,max
  tally aggregate readings.npy --valid=present.npy --ops=mean,minmax,count
  tally aggregate --shm big.npy --ops=sum,max,hist:256:-1:1
)";

}  // namespace

const absl::string_view kAggregateUsage = [] {
  static const std::string text = absl::StrCat(kUsageHead, OpsHelp(24, 78), kUsageTail);
  return absl::string_view(text);
}();

namespace {

// What the command line asked for, checked.
struct AggregateArgs {
  Connection connection;
  std::vector<v1::Aggregation> aggregations;
  // Exactly one of `input` (an array to send) and `dataset` (a resident one).
  InputSpec input;
  std::optional<std::string> dataset;
  std::optional<RangeText> range;
  std::optional<std::uint64_t> row_length;
  std::optional<std::string> offsets_path;
  std::optional<std::string> valid_path;
  bool shm = false;
  bool json = false;
  FormatOptions format;
  CallOptions call;
};

absl::StatusOr<StreamMode> ParseStreamMode(absl::string_view text) {
  if (text == "auto") return StreamMode::kAuto;
  if (text == "always") return StreamMode::kAlways;
  if (text == "never") return StreamMode::kNever;
  return absl::InvalidArgumentError(
      absl::StrCat("--stream=", text, ": expected auto, always or never"));
}

// The flags that say how to send an array, taken only when there is one.
absl::Status TakeSendingFlags(CommandLine& cl, CallOptions& call) {
  if (auto mode = cl.TakeString("stream")) {
    absl::StatusOr<StreamMode> m = ParseStreamMode(*mode);
    if (!m.ok()) return m.status();
    call.stream = *m;
  }
  return TakeChunkingFlags(cl, call);
}

// Only the command line: nothing is opened here, so every error is a usage
// error.
absl::StatusOr<AggregateArgs> ParseArgs(CommandLine& cl) {
  AggregateArgs a;
  if (absl::Status s = TakeConnectionFlags(cl, a.connection); !s.ok()) return s;
  absl::StatusOr<std::vector<v1::Aggregation>> aggs =
      ParseAggregations(cl.TakeString("ops").value_or("sum,min,max,mean,count"));
  if (!aggs.ok()) return absl::InvalidArgumentError(absl::StrCat("--ops: ", aggs.status().message()));
  a.aggregations = *std::move(aggs);

  a.dataset = cl.TakeString("dataset");
  if (auto r = cl.TakeString("range")) {
    if (!a.dataset) return absl::InvalidArgumentError("--range is for --dataset");
    absl::StatusOr<RangeText> range = ParseElementRange(*r);
    if (!range.ok()) return absl::InvalidArgumentError(absl::StrCat("--range: ", range.status().message()));
    a.range = *range;
  }
  absl::StatusOr<InputSpec> input = TakeInputFlags(cl, cl.positional());
  if (!input.ok()) return input.status();
  a.input = *std::move(input);
  if (a.dataset && a.input.given()) {
    return absl::InvalidArgumentError(
        "--dataset names an array already on the server; give no FILE.npy, --raw or --random with it");
  }
  if (!a.dataset && !a.input.given()) {
    return absl::InvalidArgumentError(
        "give exactly one input: FILE.npy, --raw=FILE --dtype=T, --random=N or --dataset=NAME");
  }
  if (a.dataset && a.dataset->empty()) return absl::InvalidArgumentError("--dataset: empty name");

  absl::StatusOr<std::optional<std::uint64_t>> rows = cl.TakeSize("rows");
  if (!rows.ok()) return rows.status();
  a.row_length = *rows;
  a.offsets_path = cl.TakeString("offsets");
  if (a.offsets_path && a.row_length) return absl::InvalidArgumentError("give --rows or --offsets, not both");
  a.valid_path = cl.TakeString("valid");
  absl::StatusOr<bool> shm = cl.TakeBool("shm");
  if (!shm.ok()) return shm.status();
  a.shm = *shm;
  if (a.shm && a.dataset) return absl::InvalidArgumentError("--shm shares an array from this host; not with --dataset");
  absl::StatusOr<bool> json = cl.TakeBool("json");
  if (!json.ok()) return json.status();
  a.json = *json;
  absl::StatusOr<bool> full = cl.TakeBool("full");
  if (!full.ok()) return full.status();
  a.format.full = *full;
  absl::StatusOr<std::optional<absl::Duration>> timeout = cl.TakeSeconds("timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) a.call.timeout = **timeout;
  // Left untaken with --dataset and --shm, so CheckAllUsed names them:
  // nothing is sent.
  if (!a.dataset && !a.shm) {
    if (absl::Status s = TakeSendingFlags(cl, a.call); !s.ok()) return s;
  }
  if (absl::Status s = cl.CheckAllUsed(); !s.ok()) {
    if (!a.dataset && !a.shm) return s;
    return absl::InvalidArgumentError(absl::StrCat(s.message(), a.shm ? " (not used with --shm)" : " (not used with --dataset)"));
  }
  return a;
}

// --offsets: a 1-D .npy of integers, as int64.
absl::StatusOr<std::vector<std::int64_t>> LoadOffsets(const std::string& path) {
  absl::StatusOr<InputArray> file = InputArray::OpenNpy(path);
  if (!file.ok()) return absl::InvalidArgumentError(absl::StrCat("--offsets: ", file.status().message()));
  const ArrayRef& o = file->array();
  if (o.row_length != 0) return absl::InvalidArgumentError(absl::StrCat("--offsets: ", path, " is not 1-D"));
  if (rules::IsFloat(o.dtype) || o.dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("--offsets: ", file->description(), " does not hold integers"));
  }
  std::vector<std::int64_t> offsets(o.length);
  absl::Status fits = absl::OkStatus();
  rules::VisitDType(o.dtype, [&](auto d) {
    using V = typename rules::Traits<decltype(d)::value>::value;
    if constexpr (std::is_integral_v<V>) {
      for (std::uint64_t i = 0; i < o.length; ++i) {
        V v;
        std::memcpy(&v, o.data + i * sizeof(V), sizeof(V));
        if constexpr (std::is_same_v<V, std::uint64_t>) {
          if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) && fits.ok()) {
            fits = absl::InvalidArgumentError(absl::StrCat("--offsets: entry ", i, " does not fit in int64"));
          }
        }
        offsets[i] = static_cast<std::int64_t>(v);
      }
    }
  });
  if (!fits.ok()) return fits;
  return offsets;
}

// --valid: a 1-D .npy of bool or integers (nonzero: valid), packed into
// the wire's bitmap (bit i % 8 of byte i / 8, least significant first).
// `length`, when known here, is the array's.
absl::StatusOr<std::vector<std::uint8_t>> LoadValidity(const std::string& path,
                                                      std::optional<std::uint64_t> length) {
  absl::StatusOr<InputArray> file = InputArray::OpenNpy(path);
  if (!file.ok()) return absl::InvalidArgumentError(absl::StrCat("--valid: ", file.status().message()));
  const ArrayRef& v = file->array();
  if (v.row_length != 0) return absl::InvalidArgumentError(absl::StrCat("--valid: ", path, " is not 1-D"));
  if (rules::IsFloat(v.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("--valid: ", file->description(), " does not hold bools"));
  }
  if (length && v.length != *length) {
    return absl::InvalidArgumentError(absl::StrCat("--valid: ", file->description(), " has ", v.length,
                                                   " entries for an array of ", *length, " elements"));
  }
  std::vector<std::uint8_t> bits((v.length + 7) / 8, 0);
  const std::size_t size = rules::SizeOf(v.dtype);
  for (std::uint64_t i = 0; i < v.length; ++i) {
    const std::byte* e = v.data + i * size;
    const bool valid = std::any_of(e, e + size, [](std::byte b) { return b != std::byte{0}; });
    if (valid) bits[i / 8] |= static_cast<std::uint8_t>(1u << (i % 8));
  }
  return bits;
}

// Opens (maps) or generates the array, cuts it into rows or segments, and
// masks it.
absl::StatusOr<InputArray> LoadArray(const AggregateArgs& a) {
  absl::StatusOr<InputArray> input = LoadInput(a.input);
  if (input.ok() && a.valid_path) {
    absl::StatusOr<std::vector<std::uint8_t>> valid = LoadValidity(*a.valid_path, input->array().length);
    if (!valid.ok()) return valid.status();
    input->set_validity(*std::move(valid));
  }
  if (input.ok() && a.offsets_path) {
    if (input->array().row_length != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--offsets cuts a 1-D array into segments; ", input->description(), " is 2-D"));
    }
    absl::StatusOr<std::vector<std::int64_t>> offsets = LoadOffsets(*a.offsets_path);
    if (!offsets.ok()) return offsets.status();
    input->set_offsets(*std::move(offsets));
  }
  if (!input.ok() || !a.row_length) return input;
  const std::uint64_t from_shape = input->array().row_length;
  if (from_shape != 0 && from_shape != *a.row_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rows=", *a.row_length, " disagrees with ", input->description()));
  }
  input->set_row_length(*a.row_length);
  return input;
}

void PrintResponse(AggregateArgs& a, const v1::AggregateResponse& response, absl::Duration elapsed,
                   std::string transport) {
  a.format.client_seconds = absl::ToDoubleSeconds(elapsed);
  a.format.transport = std::move(transport);
  const std::string text = a.json ? FormatJson(response, a.format) : FormatText(response, a.format);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

// --shm: the array goes into /dev/shm once; the server reads it there.
int ShareArray(AggregateArgs& a, Client& client, const InputArray& input) {
  const auto fail = [&](absl::string_view what, const absl::Status& s) {
    absl::FPrintF(stderr, "tally aggregate: %s: %s failed: %s: %s\n", input.description(), what,
                  absl::StatusCodeToString(s.code()), s.message());
    return kExitFailure;
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<SharedArray>> shared = SharedArray::Create(client, input.array(), a.call.timeout);
  if (!shared.ok()) return fail("sharing it", shared.status());
  absl::StatusOr<v1::AggregateResponse> response = (*shared)->Aggregate(a.aggregations, a.call.timeout);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) return fail("AggregateRegion", response.status());
  PrintResponse(a, *response, elapsed, "shm");
  return kExitOk;
}

int SendArray(AggregateArgs& a) {
  absl::StatusOr<InputArray> input = LoadArray(a);
  if (!input.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s\n", input.status().message());
    return kExitFailure;
  }
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(a.connection, "aggregate");
  if (!channel) return kExitFailure;
  Client client(channel);
  const ArrayRef& array = input->array();
  if (a.shm) return ShareArray(a, client, *input);
  ProgressBar progress;
  a.call.progress = [&progress](std::uint64_t sent, std::uint64_t total) {
    progress.Update(sent, total);
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::AggregateResponse> response = client.Aggregate(array, a.aggregations, a.call);
  const absl::Duration elapsed = absl::Now() - start;
  progress.Finish();
  if (!response.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s failed: %s: %s\n", input->description(),
                  absl::StatusCodeToString(response.status().code()), response.status().message());
    return kExitFailure;
  }
  PrintResponse(a, *response, elapsed, UsesStream(array, a.call) ? "stream" : "unary");
  return kExitOk;
}

int QueryDataset(AggregateArgs& a) {
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(a.connection, "aggregate");
  if (!channel) return kExitFailure;
  Client client(channel);
  const auto fail = [&](const absl::Status& s) {
    absl::FPrintF(stderr, "tally aggregate: dataset \"%s\" failed: %s: %s\n", *a.dataset,
                  absl::StatusCodeToString(s.code()), s.message());
    return kExitFailure;
  };
  const absl::Time start = absl::Now();
  std::optional<ElementRange> range;
  if (a.range) {
    // An open end needs the dataset's length, which only the server knows.
    std::uint64_t length = 0;
    if (!a.range->end) {
      absl::StatusOr<v1::DatasetInfo> info = client.DescribeDataset(*a.dataset, a.call.timeout);
      if (!info.ok()) return fail(info.status());
      length = info->length();
    }
    range = a.range->Resolve(length);
  }
  std::vector<std::int64_t> offsets;
  if (a.offsets_path) {
    absl::StatusOr<std::vector<std::int64_t>> loaded = LoadOffsets(*a.offsets_path);
    if (!loaded.ok()) return fail(loaded.status());
    offsets = *std::move(loaded);
  }
  std::vector<std::uint8_t> validity;
  if (a.valid_path) {
    absl::StatusOr<std::vector<std::uint8_t>> loaded = LoadValidity(*a.valid_path, std::nullopt);
    if (!loaded.ok()) return fail(loaded.status());
    validity = *std::move(loaded);
  }
  absl::StatusOr<v1::AggregateResponse> response = client.AggregateDataset(
      *a.dataset, range, a.row_length, a.aggregations, a.call.timeout, offsets, validity);
  const absl::Duration elapsed = absl::Now() - start;
  if (!response.ok()) return fail(response.status());
  PrintResponse(a, *response, elapsed, "dataset");
  return kExitOk;
}

}  // namespace

int RunAggregate(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  absl::StatusOr<AggregateArgs> a = cl.ok() ? ParseArgs(*cl) : cl.status();
  if (!a.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s\n(see tally aggregate --help)\n", a.status().message());
    return kExitUsage;
  }
  return a->dataset ? QueryDataset(*a) : SendArray(*a);
}

}  // namespace tally::client::tool
