// `tally aggregate`: send one array, print its results.
#include <cstdio>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "command_line.h"
#include "commands.h"
#include "progress_bar.h"
#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/format.h"
#include "tally/client/input.h"

namespace tally::client::tool {

const absl::string_view kAggregateUsage = R"(usage: tally aggregate [flags] (FILE.npy | --raw=FILE --dtype=T | --random=N)

Sends one array to a tally server and prints the aggregations it computed.

Input (exactly one):
  FILE.npy            a numpy .npy file (format 1.0-3.0, C order, 1-D or 2-D;
                      dtypes float32 float64 int32 int64 uint32 uint8); a 2-D
                      array is aggregated per row. The file is mapped, not read.
  --raw=FILE          raw little-endian elements of --dtype (mapped, not read)
  --random=N          N random elements of --dtype (K/M/G suffixes allowed):
                      floats uniform in [-1, 1), integers spread over a range

Flags:
  --target=HOST:PORT  server address (default 127.0.0.1:50051)
  --ops=LIST          aggregations, comma-separated (default sum,min,max,mean,count):
                        sum min max mean count argmin argmax
                        sumsq|sum_squares  var|variance[:DDOF]  std|stddev[:DDOF]
                        hist|histogram:BINS:LO:HI
  --dtype=T           float32 float64 int32 int64 uint32 uint8: required
                      with --raw; for --random (default float32); a .npy
                      file names its own
  --seed=S            seed for --random (default 1)
  --rows=N            aggregate rows of N elements each (one result per row);
                      must divide the length. A 2-D .npy file sets it.
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
  one "values"/"histograms" entry per row; integers exact; NaN and infinities
  as the strings "nan", "inf", "-inf".

Exit status: 0 success; 1 the request failed (the server's status code and
message are printed on stderr) or the input could not be read; 2 bad flags.

Examples:
  tally aggregate data.npy --ops=sum,mean,std:1
  tally aggregate --random=1G --dtype=float64 --ops=min,max,hist:100:-1:1
  tally aggregate --raw=/data/x.f32 --dtype=float32 --rows=1024 --json
  tally aggregate --target=gpu-box:50051 big.npy --stream=always --timeout=60
)";

namespace {

// Where the array comes from, as the command line says.
struct InputSpec {
  std::optional<std::string> npy_path;
  std::optional<std::string> raw_path;
  std::optional<std::uint64_t> random_length;
  DType dtype = DType::kFloat32;
  std::uint64_t seed = 1;
  std::optional<std::uint64_t> row_length;
};

// What the command line asked for, checked.
struct AggregateArgs {
  std::string target = "127.0.0.1:50051";
  std::vector<v1::Aggregation> aggregations;
  InputSpec input;
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

// Only the command line: nothing is opened here, so every error is a usage
// error.
absl::StatusOr<AggregateArgs> ParseArgs(CommandLine& cl) {
  AggregateArgs a;
  if (auto t = cl.TakeString("target")) a.target = *t;
  absl::StatusOr<std::vector<v1::Aggregation>> aggs =
      ParseAggregations(cl.TakeString("ops").value_or("sum,min,max,mean,count"));
  if (!aggs.ok()) return absl::InvalidArgumentError(absl::StrCat("--ops: ", aggs.status().message()));
  a.aggregations = *std::move(aggs);

  InputSpec& in = a.input;
  const std::optional<std::string> dtype_flag = cl.TakeString("dtype");
  in.raw_path = cl.TakeString("raw");
  absl::StatusOr<std::optional<std::uint64_t>> random = cl.TakeSize("random");
  if (!random.ok()) return random.status();
  in.random_length = *random;
  const std::optional<std::string> seed_flag = cl.TakeString("seed");
  absl::StatusOr<std::optional<std::uint64_t>> rows = cl.TakeSize("rows");
  if (!rows.ok()) return rows.status();
  in.row_length = *rows;
  absl::StatusOr<bool> json = cl.TakeBool("json");
  if (!json.ok()) return json.status();
  a.json = *json;
  absl::StatusOr<bool> full = cl.TakeBool("full");
  if (!full.ok()) return full.status();
  a.format.full = *full;
  absl::StatusOr<std::optional<absl::Duration>> timeout = cl.TakeSeconds("timeout");
  if (!timeout.ok()) return timeout.status();
  if (*timeout) a.call.timeout = **timeout;
  if (auto mode = cl.TakeString("stream")) {
    absl::StatusOr<StreamMode> m = ParseStreamMode(*mode);
    if (!m.ok()) return m.status();
    a.call.stream = *m;
  }
  if (absl::Status s = TakeChunkingFlags(cl, a.call); !s.ok()) return s;
  if (absl::Status s = cl.CheckAllUsed(); !s.ok()) return s;

  if (cl.positional().size() > 1) {
    return absl::InvalidArgumentError("more than one input file given");
  }
  if (cl.positional().size() == 1) in.npy_path = cl.positional()[0];
  if (int(in.npy_path.has_value()) + int(in.raw_path.has_value()) +
          int(in.random_length.has_value()) != 1) {
    return absl::InvalidArgumentError(
        "give exactly one input: FILE.npy, --raw=FILE --dtype=T or --random=N");
  }
  if (in.npy_path && dtype_flag) {
    return absl::InvalidArgumentError("--dtype is for --raw and --random; a .npy file names its dtype");
  }
  // Raw bytes say nothing about their type, so guessing would be silent garbage.
  if (in.raw_path && !dtype_flag) return absl::InvalidArgumentError("--raw needs --dtype");
  if (seed_flag && !in.random_length) return absl::InvalidArgumentError("--seed is for --random");
  if (dtype_flag) {
    absl::StatusOr<DType> d = ParseDType(*dtype_flag);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--dtype: ", d.status().message()));
    in.dtype = *d;
  }
  if (seed_flag && !absl::SimpleAtoi(*seed_flag, &in.seed)) {
    return absl::InvalidArgumentError(absl::StrCat("--seed=", *seed_flag, ": expected an integer"));
  }
  return a;
}

// Opens (maps) or generates the array.
absl::StatusOr<InputArray> LoadInput(const InputSpec& spec) {
  absl::StatusOr<InputArray> input = spec.npy_path   ? InputArray::OpenNpy(*spec.npy_path)
                                     : spec.raw_path ? InputArray::OpenRaw(*spec.raw_path, spec.dtype)
                                                     : InputArray::Random(*spec.random_length,
                                                                          spec.dtype, spec.seed);
  if (!input.ok() || !spec.row_length) return input;
  const std::uint64_t from_shape = input->array().row_length;
  if (from_shape != 0 && from_shape != *spec.row_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rows=", *spec.row_length, " disagrees with ", input->description()));
  }
  input->set_row_length(*spec.row_length);
  return input;
}

}  // namespace

int RunAggregate(const std::vector<std::string>& args) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(args);
  if (!cl.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s\n(see tally aggregate --help)\n", cl.status().message());
    return kExitUsage;
  }
  absl::StatusOr<AggregateArgs> a = ParseArgs(*cl);
  if (!a.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s\n(see tally aggregate --help)\n", a.status().message());
    return kExitUsage;
  }
  absl::StatusOr<InputArray> input = LoadInput(a->input);
  if (!input.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s\n", input.status().message());
    return kExitFailure;
  }

  Client client(MakeChannel(a->target));
  const ArrayRef& array = input->array();
  ProgressBar progress;
  a->call.progress = [&progress](std::uint64_t sent, std::uint64_t total) {
    progress.Update(sent, total);
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::AggregateResponse> response =
      client.Aggregate(array, a->aggregations, a->call);
  const absl::Duration elapsed = absl::Now() - start;
  progress.Finish();
  if (!response.ok()) {
    absl::FPrintF(stderr, "tally aggregate: %s failed: %s: %s\n", input->description(),
                  absl::StatusCodeToString(response.status().code()), response.status().message());
    return kExitFailure;
  }
  a->format.client_seconds = absl::ToDoubleSeconds(elapsed);
  a->format.transport = UsesStream(array, a->call) ? "stream" : "unary";
  const std::string text =
      a->json ? FormatJson(*response, a->format) : FormatText(*response, a->format);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace tally::client::tool
