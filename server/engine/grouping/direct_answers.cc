#include "server/engine/grouping/direct_answers.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <variant>

#include "server/engine/finish.h"
#include "server/engine/huge_pages.h"

namespace tally::grouping {
namespace {

// Group g's value of a direct op, by numpy's rules: NaN propagates through
// the plain ops and is skipped by the NaN-skipping ones; +inf and -inf
// together sum to NaN; a NaN-skipping extreme or mean of only NaN is NaN.
double DirectValue(OpKind kind, const KeyedSums& k, std::uint64_t g) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::uint64_t present = k.count[g] - k.nan[g];
  const bool skips = kind == OpKind::kNanSum || kind == OpKind::kNanMin || kind == OpKind::kNanMax ||
                     kind == OpKind::kNanMean || kind == OpKind::kNanCount;
  if (kind == OpKind::kCount) return static_cast<double>(k.count[g]);
  if (kind == OpKind::kNanCount) return static_cast<double>(present);
  if (!skips && k.nan[g] != 0) return nan;
  if (skips && present == 0 && kind != OpKind::kNanSum) return nan;
  const auto sum = [&] {
    const std::uint8_t inf = k.infinities[g];
    if (inf == 3) return nan;
    if (inf != 0) return inf == 1 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
    return k.sum[g];
  };
  switch (kind) {
    case OpKind::kSum: case OpKind::kNanSum: return sum();
    case OpKind::kMin: case OpKind::kNanMin: return k.min[g];
    case OpKind::kMax: case OpKind::kNanMax: return k.max[g];
    default: return sum() / static_cast<double>(skips ? present : k.count[g]);  // kMean, kNanMean
  }
}

// Each op's values group by group through DirectValue.
std::optional<std::vector<OpValues>> GroupByGroup(const std::vector<OpSpec>& ops, DType dtype, const KeyedSums& k) {
  std::vector<OpValues> out;
  for (const OpSpec& op : ops) {
    OpValues values = EmptyValues(op, dtype, k.groups);
    if (auto* d = std::get_if<std::vector<double>>(&values)) {
      for (std::uint64_t g = 0; g < k.groups; ++g) (*d)[g] = DirectValue(op.kind, k, g);
    } else if (auto* u = std::get_if<std::vector<std::uint64_t>>(&values)) {
      for (std::uint64_t g = 0; g < k.groups; ++g) (*u)[g] = static_cast<std::uint64_t>(DirectValue(op.kind, k, g));
    } else {
      return std::nullopt;
    }
    out.push_back(std::move(values));
  }
  return out;
}

// A copy of `from` in a buffer advised for huge pages.
template <typename T>
std::vector<T> HugeCopy(const std::vector<T>& from) {
  std::vector<T> to;
  ReserveHuge(to, from.size());
  to.assign(from.begin(), from.end());
  return to;
}

// Which of KeyedSums' vectors an op's values are where no group holds a
// NaN or an infinity; kMean for the means.
enum class Source { kSum, kMin, kMax, kCount, kMean };
Source SourceOf(OpKind kind) {
  switch (kind) {
    case OpKind::kSum: case OpKind::kNanSum: return Source::kSum;
    case OpKind::kMin: case OpKind::kNanMin: return Source::kMin;
    case OpKind::kMax: case OpKind::kNanMax: return Source::kMax;
    case OpKind::kCount: case OpKind::kNanCount: return Source::kCount;
    default: return Source::kMean;  // kMean, kNanMean
  }
}

}  // namespace

bool IsDirect(const OpSpec& op) {
  if (op.partial) return false;
  switch (op.kind) {
    case OpKind::kSum: case OpKind::kNanSum: case OpKind::kCount: case OpKind::kNanCount:
    case OpKind::kMin: case OpKind::kMax: case OpKind::kNanMin: case OpKind::kNanMax:
    case OpKind::kMean: case OpKind::kNanMean:
      return true;
    default:
      return false;
  }
}

KeyedArrays ArraysFor(const std::vector<OpSpec>& ops) {
  KeyedArrays a{.count = false, .sum = false, .min = false, .max = false, .mean = false};
  for (const OpSpec& op : ops) {
    switch (SourceOf(op.kind)) {
      case Source::kSum: a.sum = true; break;
      case Source::kMin: a.min = true; break;
      case Source::kMax: a.max = true; break;
      case Source::kCount: a.count = true; break;
      case Source::kMean: a.mean = true; break;
    }
  }
  return a;
}

std::optional<std::vector<OpValues>> DirectAnswers(const std::vector<OpSpec>& ops, DType dtype, KeyedSums k) {
  const bool clean = std::all_of(k.nan.begin(), k.nan.end(), [](std::uint64_t n) { return n == 0; }) &&
                     std::all_of(k.infinities.begin(), k.infinities.end(), [](std::uint8_t i) { return i == 0; });
  for (const OpSpec& op : ops) {
    const bool count = SourceOf(op.kind) == Source::kCount;
    if (ResultKindOf(op.kind, dtype) != (count ? ResultKind::kUInt64 : ResultKind::kDouble)) return std::nullopt;
  }
  if (!clean) {
    if (k.nan.empty()) k.nan.assign(k.groups, 0);
    if (k.infinities.empty()) k.infinities.assign(k.groups, 0);
    return GroupByGroup(ops, dtype, k);
  }
  // Without NaN or infinity every answer is a vector of k's (a mean's is
  // k.mean, the sums over the counts). Each vector of k's goes to the last
  // op that is it, a copy to any before: a vector of 1M groups is 8 MB, which this host's
  // allocator maps afresh for each request, and each such buffer's first
  // touch cost 5-7 ms on this 2-core VM (its 4 KiB pages at the edges of
  // the huge pages advised); building every answer group by group through
  // DirectValue took a further tenth of the host's time at 1M groups.
  std::vector<std::optional<OpValues>> values(ops.size());
  const auto last_of = [&](Source s) {
    std::size_t last = ops.size();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (SourceOf(ops[i].kind) == s) last = i;
    }
    return last;
  };
  const auto take = [&](auto& vector, Source s) {
    const std::size_t last = last_of(s);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (SourceOf(ops[i].kind) != s) continue;
      values[i] = i == last ? OpValues(std::move(vector)) : OpValues(HugeCopy(vector));
    }
  };
  take(k.sum, Source::kSum);
  take(k.min, Source::kMin);
  take(k.max, Source::kMax);
  take(k.count, Source::kCount);
  take(k.mean, Source::kMean);
  std::vector<OpValues> out;
  out.reserve(ops.size());
  for (std::optional<OpValues>& v : values) out.push_back(*std::move(v));
  return out;
}

}  // namespace tally::grouping
