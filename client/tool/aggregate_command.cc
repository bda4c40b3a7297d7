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
#include "chunking_flags.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "help_formatter.h"
#include "input_flags.h"
#include "progress_bar.h"
#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/element_range.h"
#include "tally/client/format.h"
#include "tally/client/input.h"
#include "tally/client/shared_array.h"
#include "tally/client/sizes.h"
#include "tally/rules/dtype.h"

namespace tally::client::tool {

namespace {

constexpr char kDescription[] = R"(usage: tally aggregate [flags] (FILE.npy | --raw=FILE --dtype=T | --random=N)
       tally aggregate [flags] --dataset=NAME [--range=A:B] [--rows=N | --offsets=FILE.npy] [--valid=FILE.npy]
       tally aggregate [flags] --shm (FILE.npy | --raw=FILE --dtype=T | --random=N)

Sends one array to a tally server, or names a dataset already resident there
(see tally put), and prints the aggregations it computed. Every flag takes
its value as --name=value or --name value.
)";

constexpr char kDefaultOps[] = "sum,min,max,mean,count";

// After the flags: the ops (from the registry of aggregate functions), the
// size suffixes, the output and the exit status.
constexpr char kNotesTail[] = R"(
A progress bar appears on stderr when it is a terminal and generating
--random data, or the upload, takes over a second.

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
  tally aggregate data.npy --ops sum,mean,std:1
  tally aggregate --random=1G --dtype=float64 --ops=min,max,hist:100:-1:1
  tally aggregate --raw=/data/x.f32 --dtype=float32 --rows=1024 --json
  tally aggregate --target gpu-box:50051 big.npy --stream=always --timeout=60
  tally aggregate --dataset=temps --range=1M:2M --rows=1000 --ops=mean,hist:64:-40:60
  tally aggregate values.npy --offsets=group_starts.npy --ops=sum,mean,max
  tally aggregate readings.npy --valid=present.npy --ops=mean,minmax,count
  tally aggregate --shm big.npy --ops=sum,max,hist:256:-1:1
)";

std::string Notes() {
  return absl::StrCat("Aggregations (--ops), comma-separated:\n", OpsHelp(2, 78), "\n",
                      WrapText(std::string(kSizeSuffixHelp), 0, 78), "\n", kNotesTail);
}

// The command line as given, before the rules between flags.
struct AggregateFlags {
  ConnectionFlags connection;
  std::vector<std::string> files;
  InputFlags input;
  std::optional<std::string> dataset, ops, range, offsets, valid, stream;
  std::optional<std::uint64_t> rows;
  ChunkingFlags chunking;
  std::optional<absl::Duration> timeout;
  bool shm = false, json = false, full = false;
};

std::unique_ptr<CLI::App> MakeApp(AggregateFlags& f) {
  std::unique_ptr<CLI::App> app = MakeCommandApp("tally aggregate", kDescription, Notes());
  StartGroup(*app, "Input (exactly one of FILE.npy, --raw, --random and --dataset)");
  AddArguments(*app, "FILE.npy", f.files,
               "a numpy .npy file (format 1.0-3.0, C order, 1-D or 2-D; dtypes float16 float32 float64 int8 "
               "int16 int32 int64 uint8 uint16 uint32 uint64 bool); a 2-D array is aggregated per row. The file "
               "is mapped, not read.");
  AddInputFlags(*app, f.input);
  AddTextFlag(*app, "--dataset", f.dataset, "NAME", "a resident dataset: nothing is sent but the query");
  AddSwitch(*app, "--shm", f.shm,
            "on the server's host: copy the array into a shared-memory object in /dev/shm, register it with the "
            "server as a host region, aggregate it there (AggregateRegion: the bytes are not sent), then "
            "unregister it and remove the object");
  StartGroup(*app, "Flags");
  AddTextFlag(*app, "--ops", f.ops, "LIST", "aggregations, comma-separated, listed below", kDefaultOps);
  AddSizeFlag(*app, "--rows", f.rows, "N",
              "aggregate rows of N elements each (one result per row); must divide the length (of the range, "
              "with --dataset). A 2-D .npy file sets it; with --dataset, the rows the dataset was uploaded "
              "with, if any (--rows=0: one result over every element).");
  AddTextFlag(*app, "--offsets", f.offsets, "FILE.npy",
              "aggregate variable-length segments instead (one result per segment): a 1-D .npy of integers, "
              "segments + 1 entries, 0 first, never decreasing, the array's (or the range's) length last; "
              "segment s is elements offsets[s] to offsets[s+1]-1. Empty segments give the empty array's "
              "answers (sum 0, mean NaN); min, max, minmax, argmin, argmax, ptp and their nan forms are refused "
              "for one.");
  AddTextFlag(*app, "--valid", f.valid, "FILE.npy",
              "skip missing elements: a 1-D .npy of bool (or integers: nonzero is valid) as long as the array "
              "(or the range); every op reads only the elements marked True, as numpy does on x[valid] "
              "(argmin/argmax still count every element). It is sent as a bitmap, one bit per element. A row "
              "with no valid elements gives the empty array's answers; min, max, minmax, argmin, argmax, ptp "
              "and their nan forms are refused for one.");
  AddTextFlag(*app, "--range", f.range, "A:B",
              "with --dataset: only elements A to B-1 (A: from A to the end; :B from 0), A and B counts with "
              "suffixes (1M:2M is elements 1000000 to 1999999); argmin/argmax then count from A, as if "
              "the range were the array sent",
              "the whole dataset");
  AddSwitch(*app, "--json", f.json, "print JSON instead of text (format below)");
  AddSwitch(*app, "--full", f.full, "text: print every row and every histogram count");
  AddSecondsFlag(*app, "--timeout", f.timeout, "give up after this long", "no limit");
  AddTextFlag(*app, "--stream", f.stream, "MODE",
              "auto: unary up to --stream-threshold, else AggregateStream; always; never", "auto");
  AddChunkingFlags(*app, f.chunking, "--stream=auto", "bytes per AggregateStream message");
  AddConnectionFlags(*app, f.connection);
  return app;
}

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

// The rules between flags. Nothing is opened here, so every error is a
// usage error.
absl::Status Check(const AggregateFlags& f, AggregateArgs& a) {
  absl::StatusOr<Connection> connection = f.connection.Resolve();
  if (!connection.ok()) return connection.status();
  a.connection = *std::move(connection);
  absl::StatusOr<std::vector<v1::Aggregation>> aggs = ParseAggregations(f.ops.value_or(kDefaultOps));
  if (!aggs.ok()) return absl::InvalidArgumentError(absl::StrCat("--ops: ", aggs.status().message()));
  a.aggregations = *std::move(aggs);

  a.dataset = f.dataset;
  if (f.range) {
    if (!a.dataset) return absl::InvalidArgumentError("--range is for --dataset");
    absl::StatusOr<RangeText> range = ParseElementRange(*f.range);
    if (!range.ok()) return absl::InvalidArgumentError(absl::StrCat("--range: ", range.status().message()));
    a.range = *range;
  }
  absl::StatusOr<InputSpec> input = f.input.Resolve(f.files);
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

  a.row_length = f.rows;
  a.offsets_path = f.offsets;
  if (a.offsets_path && a.row_length) return absl::InvalidArgumentError("give --rows or --offsets, not both");
  a.valid_path = f.valid;
  a.shm = f.shm;
  if (a.shm && a.dataset) return absl::InvalidArgumentError("--shm shares an array from this host; not with --dataset");
  a.json = f.json;
  a.format.full = f.full;
  if (f.timeout) a.call.timeout = *f.timeout;
  // Nothing is sent with --dataset and --shm: a flag about sending is a
  // mistake, not something to ignore.
  if (a.dataset || a.shm) {
    const char* with = a.shm ? "--shm" : "--dataset";
    if (f.stream) return absl::InvalidArgumentError(absl::StrCat("--stream is not used with ", with));
    if (f.chunking.stream_threshold) {
      return absl::InvalidArgumentError(absl::StrCat("--stream-threshold is not used with ", with));
    }
    if (f.chunking.chunk) return absl::InvalidArgumentError(absl::StrCat("--chunk is not used with ", with));
  }
  if (f.stream) {
    absl::StatusOr<StreamMode> m = ParseStreamMode(*f.stream);
    if (!m.ok()) return m.status();
    a.call.stream = *m;
  }
  f.chunking.ApplyTo(a.call);
  return absl::OkStatus();
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
  AggregateFlags flags;
  std::unique_ptr<CLI::App> app = MakeApp(flags);
  AggregateArgs a;
  if (std::optional<int> exit = ParseCommandLine(*app, args, [&] { return Check(flags, a); })) return *exit;
  return a.dataset ? QueryDataset(a) : SendArray(a);
}

}  // namespace tally::client::tool
