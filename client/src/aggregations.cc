// The --ops parser and aggregation labels.
#include "tally/client/aggregations.h"

#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "tally/client/number_text.h"
#include "tally/client/wire.h"
#include "tally/rules/op.h"

namespace tally::client {
namespace {

struct OpAlias {
  absl::string_view name;
  rules::OpKind kind;
};

constexpr OpAlias kOpAliases[] = {
    {"sum", rules::OpKind::kSum},
    {"min", rules::OpKind::kMin},
    {"max", rules::OpKind::kMax},
    {"mean", rules::OpKind::kMean},
    {"count", rules::OpKind::kCount},
    {"sum_squares", rules::OpKind::kSumSquares},
    {"sumsq", rules::OpKind::kSumSquares},
    {"variance", rules::OpKind::kVariance},
    {"var", rules::OpKind::kVariance},
    {"stddev", rules::OpKind::kStddev},
    {"std", rules::OpKind::kStddev},
    {"argmin", rules::OpKind::kArgmin},
    {"argmax", rules::OpKind::kArgmax},
    {"histogram", rules::OpKind::kHistogram},
    {"hist", rules::OpKind::kHistogram},
    {"nansum", rules::OpKind::kNanSum},
    {"nanmean", rules::OpKind::kNanMean},
    {"nanmin", rules::OpKind::kNanMin},
    {"nanmax", rules::OpKind::kNanMax},
    {"nanargmin", rules::OpKind::kNanArgmin},
    {"nanargmax", rules::OpKind::kNanArgmax},
    {"nanvar", rules::OpKind::kNanVariance},
    {"nanstd", rules::OpKind::kNanStddev},
    {"nancount", rules::OpKind::kNanCount},
    {"prod", rules::OpKind::kProduct},
    {"product", rules::OpKind::kProduct},
    {"count_nonzero", rules::OpKind::kCountNonzero},
    {"nnz", rules::OpKind::kCountNonzero},
    {"any", rules::OpKind::kAny},
    {"all", rules::OpKind::kAll},
    {"ptp", rules::OpKind::kPtp},
    {"minmax", rules::OpKind::kMinMax},
};

constexpr absl::string_view kKnownOps =
    "sum, min, max, mean, count, sum_squares|sumsq, variance|var[:DDOF], stddev|std[:DDOF], "
    "argmin, argmax, histogram|hist:BINS:LO:HI, nansum, nanmean, nanmin, nanmax, nanargmin, nanargmax, "
    "nanvar[:DDOF], nanstd[:DDOF], nancount, prod|product, count_nonzero|nnz, any, all, ptp, minmax";

absl::Status BadToken(absl::string_view token, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad aggregation \"", token, "\": ", why));
}

std::optional<double> ParseFinite(absl::string_view text) {
  double v = 0.0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return std::nullopt;
  return v;
}

absl::StatusOr<v1::Aggregation> ParseToken(absl::string_view token) {
  const std::vector<absl::string_view> parts = absl::StrSplit(token, ':');
  const std::string name = absl::AsciiStrToLower(parts[0]);
  std::optional<rules::OpKind> kind;
  for (const OpAlias& a : kOpAliases) {
    if (name == a.name) kind = a.kind;
  }
  if (!kind) return BadToken(token, absl::StrCat("unknown op; expected one of ", kKnownOps));

  v1::Aggregation agg;
  agg.set_op(ToWire(*kind));
  const size_t args = parts.size() - 1;
  switch (*kind) {
    case rules::OpKind::kVariance:
    case rules::OpKind::kStddev:
    case rules::OpKind::kNanVariance:
    case rules::OpKind::kNanStddev: {
      if (args > 1) return BadToken(token, "expected at most one argument, the ddof (e.g. var:1)");
      if (args == 1) {
        const std::optional<double> ddof = ParseFinite(parts[1]);
        if (!ddof || *ddof < 0.0) {
          return BadToken(token, "ddof must be a finite number >= 0");
        }
        agg.set_ddof(*ddof);
      }
      return agg;
    }
    case rules::OpKind::kHistogram: {
      if (args != 3) return BadToken(token, "expected histogram:BINS:LO:HI (e.g. hist:256:-1:1)");
      std::uint32_t bins = 0;
      if (!absl::SimpleAtoi(parts[1], &bins) || bins < 1 || bins > rules::kMaxHistogramBins) {
        return BadToken(token, absl::StrCat("BINS must be an integer from 1 to ",
                                            rules::kMaxHistogramBins));
      }
      const std::optional<double> lo = ParseFinite(parts[2]);
      const std::optional<double> hi = ParseFinite(parts[3]);
      if (!lo || !hi) return BadToken(token, "LO and HI must be finite numbers");
      if (!(*lo < *hi)) return BadToken(token, "LO must be less than HI");
      agg.mutable_histogram()->set_bins(bins);
      agg.mutable_histogram()->set_lo(*lo);
      agg.mutable_histogram()->set_hi(*hi);
      return agg;
    }
    default:
      if (args != 0) return BadToken(token, absl::StrCat(NameOf(*kind), " takes no arguments"));
      return agg;
  }
}

}  // namespace

absl::StatusOr<std::vector<v1::Aggregation>> ParseAggregations(absl::string_view text) {
  std::vector<v1::Aggregation> result;
  for (absl::string_view token : absl::StrSplit(text, ',')) {
    token = absl::StripAsciiWhitespace(token);
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty aggregation in \"", text, "\"; expected e.g. sum,max,var:1"));
    }
    absl::StatusOr<v1::Aggregation> agg = ParseToken(token);
    if (!agg.ok()) return agg.status();
    result.push_back(*std::move(agg));
  }
  return result;
}

std::string OpName(v1::Op op) {
  const std::optional<rules::OpKind> kind = FromWire(op);
  if (!kind) return absl::StrCat("unknown(", static_cast<int>(op), ")");
  return std::string(NameOf(*kind));
}

std::string AggregationLabel(const v1::Aggregation& aggregation) {
  const std::string name = OpName(aggregation.op());
  switch (aggregation.op()) {
    case v1::OP_VARIANCE:
    case v1::OP_STDDEV:
    case v1::OP_NANVAR:
    case v1::OP_NANSTD:
      return absl::StrCat(name, "(ddof=", DoubleText(aggregation.ddof()), ")");
    case v1::OP_HISTOGRAM:
      return absl::StrCat(name, "(bins=", aggregation.histogram().bins(),
                          ", lo=", DoubleText(aggregation.histogram().lo()),
                          ", hi=", DoubleText(aggregation.histogram().hi()), ")");
    default:
      return name;
  }
}

}  // namespace tally::client
