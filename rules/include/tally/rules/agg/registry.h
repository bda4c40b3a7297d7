// The registry of aggregate functions: every function of every family,
// found by its OpKind, by any of its names, or by its tally.v1.Op number.
// What a function is (names, parameters, result type, state, where it
// runs, what input it refuses) is asked here, never switched on elsewhere.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "tally/rules/agg/arg.h"
#include "tally/rules/agg/extremes.h"
#include "tally/rules/agg/function.h"
#include "tally/rules/agg/histogram.h"
#include "tally/rules/agg/moments.h"
#include "tally/rules/agg/product.h"
#include "tally/rules/agg/quantiles.h"
#include "tally/rules/agg/sketches.h"
#include "tally/rules/agg/sums.h"
#include "tally/rules/agg/topk.h"

namespace tally::rules::agg {

namespace registry_detail {

inline constexpr std::span<const Function> kFamilies[] = {kSums,       kMoments,  kExtremes, kArgs,    kHistograms,
                                                           kProducts,   kQuantiles, kTopKs,   kSketches};

// Every function, at its OpKind's place.
constexpr std::array<Function, kNumOpKinds> ByKind() {
  std::array<Function, kNumOpKinds> all{};
  for (std::span<const Function> family : kFamilies) {
    for (const Function& f : family) all[static_cast<std::size_t>(f.kind)] = f;
  }
  return all;
}

constexpr std::size_t Declared() {
  std::size_t n = 0;
  for (std::span<const Function> family : kFamilies) n += family.size();
  return n;
}

}  // namespace registry_detail

// Indexed by OpKind, in OpKind's order (the order lists of names take).
inline constexpr std::array<Function, kNumOpKinds> kFunctions = registry_detail::ByKind();

constexpr const Function& Of(OpKind kind) { return kFunctions[static_cast<std::size_t>(kind)]; }

// The function by its canonical name or another spelling, lower case; null
// for none.
constexpr const Function* FindByName(std::string_view name) {
  for (const Function& f : kFunctions) {
    if (f.name == name) return &f;
    for (std::string_view s : f.spellings) {
      if (!s.empty() && s == name) return &f;
    }
  }
  return nullptr;
}

// The function by its tally.v1.Op number; null for OP_UNSPECIFIED and
// numbers this build does not know.
constexpr const Function* FindByWire(int wire) {
  for (const Function& f : kFunctions) {
    if (f.wire == wire) return &f;
  }
  return nullptr;
}

// The function as `dtype` computes it: on a dtype without NaN a
// NaN-skipping function of the fused passes is its plain one. A function
// that keeps its own state stays itself: its steps skip NaN where there is
// any, and numpy's nanquantile and nanmedian of an empty integer array are
// NaN where quantile raises.
constexpr const Function& AsComputedFor(const Function& f, DType dtype) {
  return IsFloat(dtype) || f.state != nullptr ? f : Of(f.plain);
}

// "sum, min, ..., minmax": every canonical name, for messages that list
// what a caller may ask for.
inline std::string NameList() {
  std::string out;
  for (const Function& f : kFunctions) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

// The parameters' check (ParamSet::check) of op's function.
inline std::optional<std::string> CheckParams(const OpSpec& op) { return Of(op.kind).params->check(op); }

// Whether two aggregations of the same function have the same parameters
// (those the function takes; the others are ignored, as on the wire).
constexpr bool SameParams(const OpSpec& a, const OpSpec& b) {
  for (const Param& p : Of(a.kind).params->params) {
    if (p.list ? a.q != b.q : Get(a, p.id) != Get(b, p.id)) return false;
  }
  return true;
}

// The values `op` answers per row: its q's (one for the median, or a
// ddsketch without q), up to k for topk and bottomk, two for minmax, else
// one. A histogram's counts are one value here.
inline std::uint64_t ValuesPerRow(const OpSpec& op) {
  const Function& f = Of(op.kind);
  if (f.per_q) return op.q.empty() ? 1 : op.q.size();
  if (f.up_to_k) return op.k;
  return static_cast<std::uint64_t>(f.values_per_row);
}

// Each OpKind declared exactly once, at its place, and each one's facts
// consistent: a NaN-skipping function names a plain one, any other is its
// own plain function, and wire numbers are distinct.
static_assert(registry_detail::Declared() == kNumOpKinds, "every OpKind is declared by exactly one family");
static_assert([] {
  for (std::size_t k = 0; k < kFunctions.size(); ++k) {
    const Function& f = kFunctions[k];
    if (static_cast<std::size_t>(f.kind) != k || f.name.empty() || f.wire == 0) return false;
    if (f.skips_nan ? Of(f.plain).skips_nan : f.plain != f.kind) return false;
    for (std::size_t j = 0; j < k; ++j) {
      if (kFunctions[j].wire == f.wire || kFunctions[j].name == f.name) return false;
    }
  }
  return true;
}());

}  // namespace tally::rules::agg

namespace tally::rules {

// Each kind's facts, as the registry declares them: the names host code
// has always asked by.
constexpr const char* Name(OpKind k) { return agg::Of(k).name.data(); }  // the names are literals
constexpr OpKind PlainOf(OpKind k) { return agg::Of(k).plain; }
constexpr bool IsNanSkipping(OpKind k) { return agg::Of(k).skips_nan; }
constexpr bool RunsOnKernels(OpKind k) { return agg::Of(k).on_kernels; }
constexpr bool HasPartialState(OpKind k) { return agg::Of(k).partial_state; }
// No value on an empty input (numpy raises), or on a row of only NaN.
constexpr bool NeedsNonEmpty(OpKind k) { return agg::Of(k).refuses_empty; }
constexpr bool NeedsNonNan(OpKind k) { return agg::Of(k).refuses_all_nan; }
constexpr bool TakesDdof(OpKind k) { return agg::Of(k).params == &agg::kDdof; }
// An op that has no value on an empty input, unless it asks for its
// partial state (an empty state is a valid one: merging leaves the other).
constexpr bool NeedsNonEmpty(const OpSpec& op) { return !op.partial && NeedsNonEmpty(op.kind); }
// nanargmin and nanargmax have no value on an all-NaN row, unless they ask
// for the partial state: an all-NaN part's is the empty one (count 0, its
// elements counted), merged with the other parts' before any answer.
constexpr bool NeedsNonNan(const OpSpec& op) { return !op.partial && NeedsNonNan(op.kind); }

// The wire contract's value type for op's answer over `dtype`.
constexpr ResultKind ResultKindOf(OpKind op, DType dtype) { return agg::KindOf(agg::Of(op).result, dtype); }

// The op as `dtype` computes and finishes it: integer dtypes hold no NaN, so
// there each NaN-skipping op is its plain op, as in numpy (whose NaN-skipping
// variance of integers is the plain variance: a ddof >= n gives inf, not
// NaN). The backends, the shard merge and the clients' finishing all apply
// it.
constexpr OpSpec AsComputedFor(OpSpec op, DType dtype) {
  op.kind = agg::AsComputedFor(agg::Of(op.kind), dtype).kind;
  return op;
}

}  // namespace tally::rules
