// The --ops parser and aggregation labels.
#include "tally/client/aggregations.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "tally/client/number_text.h"
#include "tally/client/wire.h"
#include "tally/rules/agg/registry.h"
#include "tally/v1/aggregation_wire.h"

namespace tally::client {
namespace {

namespace agg = rules::agg;

// The registry's std::string_view as abseil's (a type of its own in
// Debian's build: wire.h).
absl::string_view Text(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// How the command line writes a function's parameters: "[:DDOF]",
// ":BINS:LO:HI".
std::string ParamSyntax(const agg::Function& f) {
  std::string out;
  for (const agg::Param& p : f.params->params) {
    absl::StrAppend(&out, p.optional ? "[:" : ":", Text(p.text), p.optional ? "]" : "");
  }
  return out;
}

// "variance|var[:DDOF]": every spelling of the function, then its parameters.
std::string Usage(const agg::Function& f) {
  std::string out(f.name.data(), f.name.size());
  for (std::string_view s : f.spellings) {
    if (!s.empty()) absl::StrAppend(&out, "|", Text(s));
  }
  return out + ParamSyntax(f);
}

std::string KnownOps() {
  std::string out;
  for (const agg::Function& f : agg::kFunctions) absl::StrAppend(&out, out.empty() ? "" : ", ", Usage(f));
  return out;
}

absl::Status BadToken(absl::string_view token, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad aggregation \"", token, "\": ", why));
}

// One parameter's text as its value: a whole number for an integer field
// (a bin count), a name's index for a choice (a quantile method), else any
// number; the range is the registry's check.
std::optional<double> ParseParam(const agg::Param& p, absl::string_view text) {
  if (!p.choices.empty()) {
    const std::string name = absl::AsciiStrToLower(text);
    for (std::size_t i = 0; i < p.choices.size(); ++i) {
      if (name == Text(p.choices[i])) return static_cast<double>(i);
    }
    return std::nullopt;
  }
  if (p.integer) {
    std::uint32_t v = 0;
    if (!absl::SimpleAtoi(text, &v)) return std::nullopt;
    return v;
  }
  double v = 0.0;
  if (!absl::SimpleAtod(text, &v)) return std::nullopt;
  return v;
}

absl::StatusOr<v1::Aggregation> ParseToken(absl::string_view token) {
  const std::vector<absl::string_view> parts = absl::StrSplit(token, ':');
  const std::string name = absl::AsciiStrToLower(parts[0]);
  const agg::Function* f = agg::FindByName(name);
  if (f == nullptr) return BadToken(token, absl::StrCat("unknown op; expected one of ", KnownOps()));

  const std::span<const agg::Param> params = f->params->params;
  const std::size_t args = parts.size() - 1;
  const auto required = static_cast<std::size_t>(
      std::count_if(params.begin(), params.end(), [](const agg::Param& p) { return !p.optional; }));
  if (args < required || args > params.size()) {
    if (params.empty()) return BadToken(token, absl::StrCat(name, " takes no arguments"));
    return BadToken(token, absl::StrCat("expected ", name, ParamSyntax(*f)));
  }
  rules::OpSpec spec;
  spec.kind = f->kind;
  for (std::size_t i = 0; i < args; ++i) {
    const agg::Param& p = params[i];
    // A list (q) is its numbers joined by commas.
    const std::vector<absl::string_view> items =
        p.list ? absl::StrSplit(parts[i + 1], ',') : std::vector<absl::string_view>{parts[i + 1]};
    for (const absl::string_view item : items) {
      const std::optional<double> v = ParseParam(p, item);
      if (!v) {
        std::string what = p.integer ? "a whole number" : "a number";
        if (!p.choices.empty()) {
          what = "one of";
          for (const std::string_view c : p.choices) absl::StrAppend(&what, c == p.choices.front() ? " " : ", ", Text(c));
        }
        return BadToken(token, absl::StrCat(Text(p.text), " must be ", what));
      }
      agg::Set(spec, p.id, *v);
    }
  }
  if (const std::optional<std::string> fault = agg::CheckParams(spec)) return BadToken(token, *fault);
  return OpSpecToProto(spec);
}

// Whether `token` ends in a list parameter (quantile:0.5 does), so that a
// number after the next comma is another of its values, not an op.
bool EndsInList(absl::string_view token) {
  const std::vector<absl::string_view> parts = absl::StrSplit(token, ':');
  const agg::Function* f = agg::FindByName(absl::AsciiStrToLower(parts[0]));
  if (f == nullptr || parts.size() < 2 || parts.size() - 1 > f->params->params.size()) return false;
  return f->params->params[parts.size() - 2].list;
}

// The comma-separated tokens of --ops, with the commas inside a list
// parameter ("quantile:0.5,0.99,max") kept in their token.
std::vector<std::string> Tokens(absl::string_view text) {
  std::vector<std::string> tokens;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    // A number, perhaps followed by the list's next parameter
    // ("quantile:0.5,0.99:hazen"), continues the list.
    double number = 0.0;
    const absl::string_view stripped = absl::StripAsciiWhitespace(piece);
    const absl::string_view head = stripped.substr(0, stripped.find(':'));
    if (!tokens.empty() && !head.empty() && absl::SimpleAtod(head, &number) && EndsInList(tokens.back())) {
      absl::StrAppend(&tokens.back(), ",", stripped);
      continue;
    }
    tokens.emplace_back(stripped);
  }
  return tokens;
}

}  // namespace

absl::StatusOr<std::vector<v1::Aggregation>> ParseAggregations(absl::string_view text) {
  std::vector<v1::Aggregation> result;
  for (const std::string& owned : Tokens(text)) {
    absl::string_view token = owned;
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
  const agg::Function* f = FunctionOf(op);
  if (f == nullptr) return absl::StrCat("unknown(", static_cast<int>(op), ")");
  return std::string(f->name);
}

std::string AggregationLabel(const v1::Aggregation& aggregation) {
  const agg::Function* f = FunctionOf(aggregation.op());
  if (f == nullptr || f->params->params.empty()) return OpName(aggregation.op());
  const rules::OpSpec spec = OpSpecFromProto(*f, aggregation);
  std::string out = absl::StrCat(Text(f->name), "(");
  for (const agg::Param& p : f->params->params) {
    std::string value;
    if (p.list) {
      std::vector<std::string> items;
      for (const double q : spec.q) items.push_back(DoubleText(q));
      value = absl::StrCat("[", absl::StrJoin(items, ", "), "]");
    } else if (!p.choices.empty()) {
      const auto c = static_cast<std::size_t>(agg::Get(spec, p.id));
      value = c < p.choices.size() ? std::string(Text(p.choices[c])) : "unknown";
    } else {
      value = DoubleText(agg::Get(spec, p.id));
    }
    absl::StrAppend(&out, &p == f->params->params.data() ? "" : ", ", Text(p.label), "=", value);
  }
  return out + ")";
}

bool SameAggregation(const v1::Aggregation& a, const v1::Aggregation& b) {
  if (a.op() != b.op()) return false;
  const agg::Function* f = FunctionOf(a.op());
  return f == nullptr || agg::SameParams(OpSpecFromProto(*f, a), OpSpecFromProto(*f, b));
}

std::string OpsHelp(std::size_t indent, std::size_t width) {
  std::string out;
  const auto group = [&](absl::string_view heading, auto keep) {
    std::string line(indent, ' ');
    if (!heading.empty()) absl::StrAppend(&line, heading);
    bool first = heading.empty();
    for (const agg::Function& f : agg::kFunctions) {
      if (!keep(f)) continue;
      const std::string word = Usage(f);
      if (!first && line.size() + 1 + word.size() > width) {
        absl::StrAppend(&out, line, "\n");
        line = std::string(indent, ' ') + word;
      } else {
        absl::StrAppend(&line, first ? "" : " ", word);
      }
      first = false;
    }
    absl::StrAppend(&out, line, "\n");
  };
  // minmax is a min and a max (values_per_row 2), which the kernels run.
  const auto on_gpu = [](const agg::Function& f) { return f.on_kernels || f.values_per_row > 1; };
  const auto own_state = [](const agg::Function& f) { return f.state != nullptr; };
  group("", [&](const agg::Function& f) { return on_gpu(f) && !f.skips_nan; });
  group("NaN-skipping, as numpy's nan-functions:", [&](const agg::Function& f) { return f.skips_nan && !own_state(f); });
  group("", [&](const agg::Function& f) { return !on_gpu(f) && !own_state(f); });
  absl::StrAppend(&out, std::string(indent, ' '), "(this group runs on the CPU: on a GPU server,\n",
                  std::string(indent, ' '), "not for --dataset data kept on the GPU)\n");
  group("Quantiles (numpy's METHODs), top-k, sketches:", own_state);
  return out;
}

}  // namespace tally::client
