// `tally groupby`: send a table's columns (.npy files, or the arrays of a
// .npz) and print each group's aggregations (GroupBy).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "commands.h"
#include "connection_flags.h"
#include "flags.h"
#include "help_formatter.h"
#include "tally/client/aggregations.h"
#include "tally/client/client.h"
#include "tally/client/format.h"
#include "tally/client/group_by.h"
#include "tally/client/input.h"
#include "tally/client/npy.h"
#include "tally/client/npz.h"
#include "tally/client/shared_array.h"
#include "tally/client/number_text.h"
#include "tally/client/wire.h"
#include "tally/rules/dtype.h"

namespace tally::client::tool {
namespace {

constexpr char kDescription[] = R"(usage: tally groupby [flags] --by=KEYS --agg=COLUMN:OPS [--agg=COLUMN:OPS ...] INPUT...

Sends a table to a tally server and prints, for each distinct key of the key
columns, the aggregations of the value columns (GroupBy: SQL's GROUP BY,
pandas' df.groupby(KEYS).agg(...)). Each INPUT is a .npz file, whose arrays
are columns named as in the file, NAME=FILE.npy, one column, or
NAME@DATASET, a resident dataset's elements (see tally put: nothing is
sent); every column must have the same length. Columns of more than 4 MiB
in all go in chunks (GroupByStream), so a table of any size fits the
server's message limit. With --shm, on the server's host, the file columns
go into shared memory once and the server reads them there. Groups come in
ascending key order; rows whose key is NaN are dropped (pandas' defaults).
)";

constexpr char kNotesTail[] = R"notes(
The ops are numpy's: sum adds NaN in (NaN), nansum skips it, as pandas'
groupby sum does. Indices (argmin, argmax, topk's) are rows of the table.

Text: one line per group, the keys then each aggregation, at most 20 groups
unless --full (then "... (N more groups)"); aggregations that give several
values per group (quantile lists, topk, minmax, histograms) are printed per
aggregation instead, one entry per group.

JSON: {"groups":N,
       "keys":[{"name":"k","dtype":"int32","values":[...],"missing":[...]}],
       "results":[{"column":"v","op":"sum","type":"float64","values":[...]}, ...],
       "execution":{...}}
  one "values" entry per group; "missing" lists the groups whose key is
  missing (only with --keep-na and a masked key); otherwise as tally
  aggregate --json prints results.

Exit status: 0 success; 1 the request failed (the server's status and
message on stderr) or an input could not be read; 2 bad flags.

Examples:
  tally groupby sales.npz --by=customer --agg=amount:sum,mean,count
  tally groupby k=keys.npy v=values.npy --by=k --agg=v:nanmedian,nanstd:1
  tally groupby t.npz --by=day,sensor --agg=temp:min,max --agg=hum:mean --json
  tally groupby t.npz --by=city --agg=price:topk:3 --unsorted --keep-na
  tally groupby day@days temp@temps --by=day --agg=temp:nanmean,nanmax
  tally groupby big.npz --by=k --agg=v:sum,mean --shm
)notes";

std::string Notes() {
  return absl::StrCat("Aggregations (--agg COLUMN:OPS), OPS comma-separated:\n", OpsHelp(2, 78), "\n", kNotesTail);
}

struct GroupByFlags {
  ConnectionFlags connection;
  std::vector<std::string> inputs;
  std::vector<std::string> aggs;
  std::optional<std::string> by;
  std::optional<absl::Duration> timeout;
  bool unsorted = false, keep_na = false, json = false, full = false, shm = false;
};

std::unique_ptr<CLI::App> MakeApp(GroupByFlags& f) {
  std::unique_ptr<CLI::App> app = MakeCommandApp("tally groupby", kDescription, Notes());
  StartGroup(*app, "Input");
  AddArguments(*app, "INPUT", f.inputs,
               "TABLE.npz (every array a column, named as in the file), NAME=FILE.npy (one 1-D column) or "
               "NAME@DATASET (a resident dataset as the column); "
               "dtypes float16 float32 float64 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool");
  StartGroup(*app, "Flags");
  AddTextFlag(*app, "--by", f.by, "KEYS",
              "key columns, comma-separated, 0 to 8 (GROUP BY a, b); none: every aggregation over its whole "
              "column",
              "none");
  AddRepeatedTextFlag(*app, "--agg", f.aggs, "COLUMN:OPS",
                      "the aggregations of one value column, e.g. --agg=price:sum,mean,std:1; repeat for other "
                      "columns; at least one");
  AddSwitch(*app, "--unsorted", f.unsorted, "groups in the order their keys are first seen (pandas' sort=False)");
  AddSwitch(*app, "--keep-na", f.keep_na,
            "keep rows whose key is NaN or missing, as one more group sorted last (pandas' dropna=False)");
  AddSwitch(*app, "--shm", f.shm,
            "on the server's host: copy each column read from a file into a shared-memory object in /dev/shm, "
            "register it, and send the region instead of the bytes (GroupBy reads the column there); the "
            "regions are unregistered and the objects removed when the command ends");
  AddSwitch(*app, "--json", f.json, "print JSON instead of text (format below)");
  AddSwitch(*app, "--full", f.full, "text: print every group");
  AddSecondsFlag(*app, "--timeout", f.timeout, "give up after this long", "no limit");
  AddConnectionFlags(*app, f.connection);
  return app;
}

struct GroupByArgs {
  Connection connection;
  v1::GroupByRequest request;  // columns come later, from the inputs
  std::vector<std::string> inputs;
  std::vector<std::string> agg_columns;  // the column of each aggregation, for printing
  bool json = false, full = false, shm = false;
  absl::Duration timeout = absl::InfiniteDuration();
};

// --shm: the columns' shared copies, registered until the command ends
// (destroyed before the Client they unregister through).
using SharedColumns = std::vector<std::unique_ptr<SharedArray>>;

absl::Status Check(const GroupByFlags& f, GroupByArgs& a) {
  absl::StatusOr<Connection> connection = f.connection.Resolve();
  if (!connection.ok()) return connection.status();
  a.connection = *std::move(connection);
  if (f.inputs.empty()) {
    return absl::InvalidArgumentError("give the table: TABLE.npz, or NAME=FILE.npy or NAME@DATASET per column");
  }
  a.inputs = f.inputs;
  if (f.by) {
    for (absl::string_view k : absl::StrSplit(*f.by, ',', absl::SkipEmpty())) a.request.add_keys(std::string(k));
  }
  if (f.aggs.empty()) return absl::InvalidArgumentError("--agg: give at least one, e.g. --agg=price:sum,mean");
  for (const std::string& spec : f.aggs) {
    const std::size_t colon = spec.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--agg=", spec, ": expected COLUMN:OPS, e.g. price:sum,mean"));
    }
    absl::StatusOr<std::vector<v1::Aggregation>> ops = ParseAggregations(spec.substr(colon + 1));
    if (!ops.ok()) return absl::InvalidArgumentError(absl::StrCat("--agg=", spec, ": ", ops.status().message()));
    for (v1::Aggregation& op : *ops) {
      v1::GroupAggregation* g = a.request.add_aggregations();
      g->set_column(spec.substr(0, colon));
      *g->mutable_aggregation() = std::move(op);
      a.agg_columns.push_back(spec.substr(0, colon));
    }
  }
  a.request.set_first_seen_order(f.unsorted);
  a.request.set_keep_na_keys(f.keep_na);
  a.json = f.json;
  a.full = f.full;
  a.shm = f.shm;
  if (f.timeout) a.timeout = *f.timeout;
  return absl::OkStatus();
}

// The array in the bytes of a whole .npy file (1-D).
absl::StatusOr<ArrayRef> ArrayFromNpy(const std::string& npy, const std::string& where) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(npy.data()), npy.size());
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(file);
  if (!header.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", header.status().message()));
  if (header->shape.size() != 1) return absl::InvalidArgumentError(absl::StrCat(where, ": a column must be 1-D"));
  return ArrayRef{.dtype = header->dtype, .data = file.data() + header->data_offset, .length = header->elements()};
}

// Column `name` of the request: the array's bytes, or with --shm a region
// holding a copy of them.
absl::Status AddColumn(GroupByArgs& a, Client& client, SharedColumns& shared_columns, const std::string& name,
                       const ArrayRef& array, const std::string& where) {
  if (!a.shm) {
    *a.request.add_columns() = ColumnOf(name, array);
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<SharedArray>> shared = SharedArray::Create(client, array, a.timeout);
  if (!shared.ok()) {
    return absl::Status(shared.status().code(), absl::StrCat(where, ": sharing it: ", shared.status().message()));
  }
  v1::Column* c = a.request.add_columns();
  c->set_name(name);
  c->set_dtype(ToWire(array.dtype));
  c->mutable_region()->set_name((*shared)->region());
  c->mutable_region()->set_offset(0);
  c->mutable_region()->set_length(array.length);
  shared_columns.push_back(*std::move(shared));
  return absl::OkStatus();
}

absl::Status LoadColumns(GroupByArgs& a, Client& client, SharedColumns& shared) {
  for (const std::string& input : a.inputs) {
    const std::size_t eq = input.find('='), at = input.find('@');
    if (at != std::string::npos && (eq == std::string::npos || at < eq)) {
      // NAME@DATASET: a resident dataset's elements; nothing is sent.
      v1::Column* c = a.request.add_columns();
      c->set_name(input.substr(0, at));
      c->set_dataset(input.substr(at + 1));
      continue;
    }
    if (eq == std::string::npos) {
      if (!absl::EndsWith(input, ".npz")) {
        return absl::InvalidArgumentError(absl::StrCat(input, ": expected TABLE.npz, NAME=FILE.npy or NAME@DATASET"));
      }
      absl::StatusOr<std::vector<NpzMember>> members = ReadNpz(input);
      if (!members.ok()) return members.status();
      for (const NpzMember& m : *members) {
        const std::string where = absl::StrCat(input, ": ", m.name);
        absl::StatusOr<ArrayRef> array = ArrayFromNpy(m.npy, where);
        if (!array.ok()) return array.status();
        if (absl::Status s = AddColumn(a, client, shared, m.name, *array, where); !s.ok()) return s;
      }
      continue;
    }
    const std::string name = input.substr(0, eq), path = input.substr(eq + 1);
    absl::StatusOr<InputArray> file = InputArray::OpenNpy(path);
    if (!file.ok()) return file.status();
    if (file->array().row_length != 0) return absl::InvalidArgumentError(absl::StrCat(path, ": a column must be 1-D"));
    if (absl::Status s = AddColumn(a, client, shared, name, file->array(), path); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The text of group g's key in `column`.
std::string KeyText(const v1::Column& column, std::uint64_t g) {
  if (!column.validity().empty() && !((static_cast<unsigned char>(column.validity()[g / 8]) >> (g % 8)) & 1u)) {
    return "<NA>";
  }
  const std::optional<rules::DType> dtype = FromWire(column.dtype());
  if (!dtype) return "?";
  return rules::VisitDType(*dtype, [&](auto d) -> std::string {
    using T = typename rules::Traits<decltype(d)::value>::value;
    T v;
    std::memcpy(&v, column.data().data() + g * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, bool>) {
      return v ? "True" : "False";
    } else if constexpr (std::is_integral_v<T>) {
      return absl::StrCat(v);
    } else {
      return DoubleText(static_cast<double>(static_cast<float>(v)) == static_cast<double>(v)
                            ? static_cast<double>(static_cast<float>(v))
                            : static_cast<double>(v));
    }
  });
}

// Group g's value of a result with one value per group.
std::string ValueText(const v1::AggregationResult& r, std::uint64_t g) {
  if (r.has_doubles()) return DoubleText(r.doubles().values(static_cast<int>(g)));
  if (r.has_int64s()) return absl::StrCat(r.int64s().values(static_cast<int>(g)));
  return absl::StrCat(r.uint64s().values(static_cast<int>(g)));
}

bool OneValuePerGroup(const v1::AggregationResult& r, std::uint64_t groups) {
  const std::uint64_t n = r.has_doubles()  ? static_cast<std::uint64_t>(r.doubles().values_size())
                          : r.has_int64s() ? static_cast<std::uint64_t>(r.int64s().values_size())
                          : r.has_uint64s() ? static_cast<std::uint64_t>(r.uint64s().values_size())
                                            : groups + 1;
  return n == groups && r.indices().values_size() == 0;
}

std::string AggregationName(const std::string& column, const v1::Aggregation& a) {
  v1::AggregateResponse one;
  *one.add_results()->mutable_aggregation() = a;
  // FormatJson names the op as the registry does; the text form is "op".
  const std::string json = FormatJson(one);
  const std::size_t at = json.find("\"op\":\"");
  const std::string op = at == std::string::npos ? "?" : json.substr(at + 6, json.find('"', at + 6) - at - 6);
  return absl::StrCat(column, ":", op);
}

std::string FormatGroupsText(const GroupByArgs& a, const v1::GroupByResponse& r) {
  const std::uint64_t groups = r.groups();
  const bool table = std::all_of(r.results().begin(), r.results().end(),
                                 [&](const v1::AggregationResult& x) { return OneValuePerGroup(x, groups); });
  const std::uint64_t shown = a.full ? groups : std::min<std::uint64_t>(groups, 20);
  std::string out = absl::StrCat(groups, groups == 1 ? " group\n" : " groups\n");
  std::vector<std::vector<std::string>> cells(shown + 1);
  for (const v1::Column& k : r.keys()) cells[0].push_back(k.name());
  if (table) {
    for (int i = 0; i < r.results_size(); ++i) {
      cells[0].push_back(AggregationName(a.agg_columns[static_cast<std::size_t>(i)], r.results(i).aggregation()));
    }
  }
  for (std::uint64_t g = 0; g < shown; ++g) {
    for (const v1::Column& k : r.keys()) cells[g + 1].push_back(KeyText(k, g));
    if (table) {
      for (const v1::AggregationResult& x : r.results()) cells[g + 1].push_back(ValueText(x, g));
    }
  }
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& row : cells) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  if (!cells[0].empty()) {
    for (const auto& row : cells) {
      std::string line;
      for (std::size_t c = 0; c < row.size(); ++c) {
        line.append(c == 0 ? "" : "  ").append(width[c] - row[c].size(), ' ').append(row[c]);
      }
      out.append(line).append("\n");
    }
  }
  if (shown < groups) absl::StrAppend(&out, "... (", groups - shown, " more groups; --full prints them)\n");
  v1::AggregateResponse rest;
  if (!table) *rest.mutable_results() = r.results();
  *rest.mutable_execution() = r.execution();
  FormatOptions o;
  o.full = a.full;
  o.max_rows = 20;
  out.append(FormatText(rest, o));
  return out;
}

std::string FormatGroupsJson(const GroupByArgs& a, const v1::GroupByResponse& r, double client_seconds) {
  std::string keys;
  for (const v1::Column& k : r.keys()) {
    std::vector<std::string> values, missing;
    for (std::uint64_t g = 0; g < r.groups(); ++g) {
      const std::string t = KeyText(k, g);
      if (t == "<NA>") missing.push_back(absl::StrCat(g));
      values.push_back(t == "<NA>" ? "null" : t == "nan" || t == "inf" || t == "-inf" ? JsonQuote(t)
                                            : t == "True" ? "true" : t == "False" ? "false" : t);
    }
    const std::optional<rules::DType> dtype = FromWire(k.dtype());
    absl::StrAppend(&keys, keys.empty() ? "" : ",", "{\"name\":", JsonQuote(k.name()), ",\"dtype\":\"",
                    dtype ? NameOf(*dtype) : "?", "\",\"values\":[", absl::StrJoin(values, ","), "]",
                    missing.empty() ? "" : absl::StrCat(",\"missing\":[", absl::StrJoin(missing, ","), "]"), "}");
  }
  v1::AggregateResponse rest;
  *rest.mutable_results() = r.results();
  *rest.mutable_execution() = r.execution();
  FormatOptions o;
  o.client_seconds = client_seconds;
  o.transport = "groupby";
  std::string body = FormatJson(rest, o);  // {"results":[{"op":...},...],"execution":{...}}
  // Each result names its column, before its op.
  std::size_t at = 0;
  for (const std::string& column : a.agg_columns) {
    at = body.find("{\"op\":", at);
    if (at == std::string::npos) break;
    const std::string field = absl::StrCat("{\"column\":", JsonQuote(column), ",");
    body.replace(at, 1, field);
    at += field.size();
  }
  return absl::StrCat("{\"groups\":", r.groups(), ",\"keys\":[", keys, "],", body.substr(1));
}

}  // namespace

int RunGroupBy(const std::vector<std::string>& args) {
  GroupByFlags flags;
  std::unique_ptr<CLI::App> app = MakeApp(flags);
  GroupByArgs a;
  if (std::optional<int> exit = ParseCommandLine(*app, args, [&] { return Check(flags, a); })) return *exit;
  std::shared_ptr<grpc::Channel> channel = OpenOrReport(a.connection, "groupby");
  if (!channel) return kExitFailure;
  Client client(channel);
  SharedColumns shared;
  if (absl::Status s = LoadColumns(a, client, shared); !s.ok()) {
    absl::FPrintF(stderr, "tally groupby: %s\n", s.message());
    return kExitFailure;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::GroupByResponse> response = client.GroupBy(a.request, CallOptions{.timeout = a.timeout});
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!response.ok()) {
    absl::FPrintF(stderr, "tally groupby: GroupBy failed: %s: %s\n", absl::StatusCodeToString(response.status().code()),
                  response.status().message());
    return kExitFailure;
  }
  const std::string text = a.json ? FormatGroupsJson(a, *response, seconds) : FormatGroupsText(a, *response);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace tally::client::tool
