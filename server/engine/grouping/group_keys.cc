#include "server/engine/grouping/group_keys.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "server/core/group_request.h"
#include "server/engine/huge_pages.h"
#include "absl/strings/str_cat.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/half.h"

namespace tally::grouping {
namespace {

// A key as a 64-bit number (rules::agg::CanonicalBits: floats widened to
// float64 with -0.0 as 0.0 and every NaN as one, integers as int64 or uint64).
template <typename T>
std::uint64_t KeyBits(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return rules::agg::CanonicalBits(v);
}
constexpr std::uint64_t kNanBits = 0x7ff8000000000000ull;

// Numbers a column's values in first-seen order: `code[row]` for every row
// that is not dropped, `values[code]` the canonical value of each (0 for NA),
// `na` the NA code, or kNoGroup when no NA row is kept.
struct Codes {
  std::vector<std::uint32_t> code;
  std::vector<std::uint64_t> values;
  std::uint32_t na = kNoGroup;
  bool stopped = false;  // more distinct values than the caller's `stop_past`: nothing else is set
};

// Keys the caller has widened to canonical bits, with their NA flags, coded
// in first-seen order by a hash map (integer keys within a small range take
// a direct table instead, CodeDense). Past `stop_past` distinct values it
// stops (Codes::stopped), for a caller that codes many values another way.
template <typename Canon>
absl::StatusOr<Codes> CodeColumn(std::uint64_t rows, Canon canon, const GroupOptions& options,
                                 const std::vector<std::uint32_t>* dropped,
                                 std::uint64_t stop_past = std::numeric_limits<std::uint64_t>::max()) {
  Codes out;
  ReserveHuge(out.code, rows);
  out.code.assign(rows, kNoGroup);
  absl::flat_hash_map<std::uint64_t, std::uint32_t> seen;
  for (std::uint64_t r = 0; r < rows; ++r) {
    if (dropped != nullptr && (*dropped)[r] == kNoGroup) continue;
    bool na = false;
    const std::uint64_t v = canon(r, na);
    if (na) {
      if (options.dropna) continue;
      if (out.na == kNoGroup) {
        out.na = static_cast<std::uint32_t>(out.values.size());
        out.values.push_back(0);
        if (out.values.size() > options.max_groups) return TooManyGroups(options.max_groups);
      }
      out.code[r] = out.na;
      continue;
    }
    auto [at, fresh] = seen.try_emplace(v, static_cast<std::uint32_t>(out.values.size()));
    if (fresh) {
      if (out.values.size() == stop_past) return Codes{.stopped = true};
      out.values.push_back(v);
      if (out.values.size() > options.max_groups) return TooManyGroups(options.max_groups);
    }
    out.code[r] = at->second;
  }
  return out;
}

// Most entries of a direct table of codes (a quarter of a GiB of them at
// most; the hash map takes wider ranges): a key range that is at most this
// and at most the rows plus 2^16 is coded by indexing, with no hashing and,
// for sorted groups, no sort.
constexpr std::uint64_t kMaxDenseRange = std::uint64_t{1} << 26;

struct GroupPolicy {
  // Distinct composite numbers past which they are coded by a sort of every
  // row's number (CodeBySort) rather than the hash map: a map of 2^20
  // entries (16 MB) is past the caches, where each insert is a miss. The
  // "groups found" phase on a 2-core VM, 1e7 rows of three int64 keys over
  // 2^41 each (docs/performance.md): 1,000 tuples, the map 193-198 ms, a
  // sort of every row 275-682, the map then the sort at 2^20 189-197; the
  // h2o q10's 10M groups of six keys, 1,778-1,906, 684-947 and 782-801 ms.
  static constexpr std::uint64_t kSortPastDistinct = std::uint64_t{1} << 20;
};

bool FitsDense(std::uint64_t range, std::uint64_t rows) {
  return range <= kMaxDenseRange && range <= rows + (std::uint64_t{1} << 16);
}

// CodeColumn for values that are offsets in [0, range): a table indexed by
// the offset, in ascending order of the offsets when the groups are sorted
// (NA last), else in first-seen order. `values` holds each code's offset.
template <typename Offset>
absl::StatusOr<Codes> CodeDense(std::uint64_t rows, std::uint64_t range, Offset offset, const GroupOptions& options,
                                const std::vector<std::uint32_t>* dropped) {
  Codes out;
  ReserveHuge(out.code, rows);
  out.code.assign(rows, kNoGroup);
  std::vector<std::uint32_t> code_of;
  ReserveHuge(code_of, range);
  code_of.assign(range, kNoGroup);
  const auto kept = [&](std::uint64_t r) { return dropped == nullptr || (*dropped)[r] != kNoGroup; };
  if (options.sort) {
    bool na_seen = false;
    for (std::uint64_t r = 0; r < rows; ++r) {
      if (!kept(r)) continue;
      bool na = false;
      const std::uint64_t v = offset(r, na);
      if (na) {
        na_seen = true;
      } else {
        code_of[v] = 0;
      }
    }
    for (std::uint64_t v = 0; v < range; ++v) {
      if (code_of[v] == kNoGroup) continue;
      code_of[v] = static_cast<std::uint32_t>(out.values.size());
      out.values.push_back(v);
    }
    if (na_seen && !options.dropna) {
      out.na = static_cast<std::uint32_t>(out.values.size());
      out.values.push_back(0);
    }
    if (out.values.size() > options.max_groups) return TooManyGroups(options.max_groups);
    for (std::uint64_t r = 0; r < rows; ++r) {
      if (!kept(r)) continue;
      bool na = false;
      const std::uint64_t v = offset(r, na);
      out.code[r] = na ? out.na : code_of[v];
    }
    return out;
  }
  for (std::uint64_t r = 0; r < rows; ++r) {
    if (!kept(r)) continue;
    bool na = false;
    const std::uint64_t v = offset(r, na);
    std::uint32_t* slot = nullptr;
    if (na) {
      if (options.dropna) continue;
      slot = &out.na;
    } else {
      slot = &code_of[v];
    }
    if (*slot == kNoGroup) {
      *slot = static_cast<std::uint32_t>(out.values.size());
      out.values.push_back(na ? 0 : v);
      if (out.values.size() > options.max_groups) return TooManyGroups(options.max_groups);
    }
    out.code[r] = *slot;
  }
  return out;
}

// Sorts `pairs` by their first member, an unsigned number: a stable
// counting sort a digit of kDigitBits, least significant first, skipping
// the digits every number shares. std::sort of the pairs was a tenth of
// the h2o q10's group-by (perf; 10M groups of six keys, 1e7 rows, a 2-core
// VM): its "groups found" phase went from 1.87-2.21 s to 1.68-1.96 s.
void SortByFirst(std::vector<std::pair<std::uint64_t, std::uint32_t>>& pairs) {
  constexpr std::size_t kFewPairs = 4096;  // fewer: std::sort, which needs no counts
  if (pairs.size() < kFewPairs) {
    std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return;
  }
  constexpr int kDigitBits = 11;  // 2,048 counters: the scatter's targets stay in cache
  constexpr std::uint64_t kDigits = std::uint64_t{1} << kDigitBits;
  std::uint64_t any = 0, every = ~std::uint64_t{0};
  for (const auto& p : pairs) {
    any |= p.first;
    every &= p.first;
  }
  const std::uint64_t varying = any ^ every;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> other(pairs.size());
  std::vector<std::uint64_t> start(kDigits);
  for (int shift = 0; shift < 64; shift += kDigitBits) {
    if (((varying >> shift) & (kDigits - 1)) == 0) continue;
    std::fill(start.begin(), start.end(), 0);
    for (const auto& p : pairs) ++start[(p.first >> shift) & (kDigits - 1)];
    std::uint64_t at = 0;
    for (std::uint64_t& s : start) {
      const std::uint64_t n = s;
      s = at;
      at += n;
    }
    for (const auto& p : pairs) other[start[(p.first >> shift) & (kDigits - 1)]++] = p;
    pairs.swap(other);
  }
}

// Numbers (no NA) coded in ascending order by sorting (number, row) pairs
// (SortByFirst) and counting the distinct numbers along them; for `rows`
// below 2^32 and numbers too spread for a direct table, where there are
// many distinct ones (GroupPolicy::kSortPastDistinct). Coding them by a
// hash map and then sorting the distinct numbers (CodeColumn, SortCodes)
// took most of the h2o q10's "groups found" phase (1e7 rows, 10M groups of
// six keys: 10M random inserts, then 10M random lookups to renumber).
template <typename Number>
absl::StatusOr<Codes> CodeBySort(std::uint64_t rows, Number number, const GroupOptions& options,
                                 const std::vector<std::uint32_t>* dropped) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> pairs;
  ReserveHuge(pairs, rows);
  for (std::uint64_t r = 0; r < rows; ++r) {
    if (dropped == nullptr || (*dropped)[r] != kNoGroup) pairs.emplace_back(number(r), static_cast<std::uint32_t>(r));
  }
  SortByFirst(pairs);
  Codes out;
  ReserveHuge(out.code, rows);
  out.code.assign(rows, kNoGroup);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    if (i == 0 || pairs[i].first != pairs[i - 1].first) {
      if (out.values.size() == options.max_groups) return TooManyGroups(options.max_groups);
      out.values.push_back(pairs[i].first);
    }
    out.code[pairs[i].second] = static_cast<std::uint32_t>(out.values.size() - 1);
  }
  return out;
}

// Renumbers `codes` so that the values come in ascending order (`order`
// maps a canonical value to an unsigned number of the same order), NA
// last.
template <typename Order>
void SortCodes(Codes& codes, Order order) {
  // (value, code) pairs side by side: sorting them reads memory in order,
  // where sorting codes by their values would look each value up.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> by_value;
  by_value.reserve(codes.values.size());
  for (std::uint32_t c = 0; c < codes.values.size(); ++c) {
    if (c != codes.na) by_value.emplace_back(order(codes.values[c]), c);
  }
  SortByFirst(by_value);
  if (codes.na != kNoGroup) by_value.emplace_back(0, codes.na);
  const std::size_t n = by_value.size();
  std::vector<std::uint32_t> rank(n);
  for (std::uint32_t i = 0; i < n; ++i) rank[by_value[i].second] = i;
  for (std::uint32_t& c : codes.code) {
    if (c != kNoGroup) c = rank[c];
  }
  std::vector<std::uint64_t> values(n);
  for (std::uint32_t i = 0; i < n; ++i) values[i] = codes.values[by_value[i].second];
  codes.values = std::move(values);
  if (codes.na != kNoGroup) codes.na = static_cast<std::uint32_t>(n - 1);
}

// A canonical value of `dtype` as an unsigned number of the same order: a
// float's bits with the sign flipped (and the rest too where it is
// negative), a signed integer's with its sign bit flipped. (NaN is NA and
// never sorted; -0.0 is 0.0.)
std::uint64_t OrderOf(DType dtype, std::uint64_t canonical) {
  constexpr std::uint64_t kSign = std::uint64_t{1} << 63;
  if (rules::IsFloat(dtype)) return (canonical & kSign) != 0 ? ~canonical : canonical | kSign;
  if (rules::IsSigned(dtype)) return canonical ^ kSign;
  return canonical;
}

absl::StatusOr<Codes> CodeKeyColumn(const KeyColumn& column, std::uint64_t rows, const GroupOptions& options,
                                    const std::vector<std::uint32_t>* dropped) {
  return rules::VisitDType(column.dtype, [&](auto d) -> absl::StatusOr<Codes> {
    using T = typename rules::Traits<decltype(d)::value>::value;
    const std::byte* data = column.data.data();
    const ArraySpec mask{.dtype = column.dtype, .length = rows, .validity = column.validity};
    if constexpr (!rules::agg::kFloatElement<T>) {
      // Integers and bools in a small range: their offset from the
      // smallest key indexes a table (no NaN: only the mask makes NA).
      // Every row present and kept (no mask, no earlier column's drops):
      // loops without a test per row, which the compiler vectorises (a
      // quarter of the coding's time for 10M int8 keys).
      const bool every_row = column.validity == nullptr && dropped == nullptr;
      const auto at = [&](std::uint64_t r) {
        T v;
        std::memcpy(&v, data + r * sizeof(T), sizeof(T));
        return v;
      };
      bool any = false;
      T lo{}, hi{};
      if (every_row) {
        any = rows != 0;
        if (any) lo = hi = at(0);
        for (std::uint64_t r = 1; r < rows; ++r) {
          const T v = at(r);
          lo = v < lo ? v : lo;
          hi = v > hi ? v : hi;
        }
      } else {
        for (std::uint64_t r = 0; r < rows; ++r) {
          if ((dropped != nullptr && (*dropped)[r] == kNoGroup) || !mask.Valid(r)) continue;
          const T v = at(r);
          if (!any || v < lo) lo = v;
          if (!any || v > hi) hi = v;
          any = true;
        }
      }
      const std::uint64_t range =
          any ? static_cast<std::uint64_t>(static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo)) + 1 : 1;
      if (range != 0 && FitsDense(range, rows) && every_row) {
        return CodeDense(
            rows, range,
            [&](std::uint64_t r, bool& na) -> std::uint64_t {
              na = false;
              return static_cast<std::uint64_t>(at(r)) - static_cast<std::uint64_t>(lo);
            },
            options, nullptr);
      }
      if (range != 0 && FitsDense(range, rows)) {
        return CodeDense(
            rows, range,
            [&](std::uint64_t r, bool& na) -> std::uint64_t {
              na = !mask.Valid(r);
              T v;
              std::memcpy(&v, data + r * sizeof(T), sizeof(T));
              return na ? 0 : static_cast<std::uint64_t>(v) - static_cast<std::uint64_t>(lo);
            },
            options, dropped);
      }
    }
    absl::StatusOr<Codes> codes = CodeColumn(
        rows,
        [&](std::uint64_t r, bool& na) {
          const std::uint64_t bits = KeyBits<T>(data + r * sizeof(T));
          na = !mask.Valid(r) || (rules::agg::kFloatElement<T> && bits == kNanBits);
          return bits;
        },
        options, dropped);
    if (codes.ok() && options.sort) {
      SortCodes(*codes, [&](std::uint64_t v) { return OrderOf(column.dtype, v); });
    }
    return codes;
  });
}

}  // namespace

bool KeyIsMissing(const KeyColumn& column, std::uint64_t row) {
  const ArraySpec mask{.dtype = column.dtype, .length = row + 1, .validity = column.validity};
  if (!mask.Valid(row)) return true;
  return rules::VisitDType(column.dtype, [&](auto d) {
    using T = typename rules::Traits<decltype(d)::value>::value;
    if constexpr (rules::agg::kFloatElement<T>) {
      return KeyBits<T>(column.data.data() + row * sizeof(T)) == kNanBits;
    } else {
      return false;
    }
  });
}

absl::StatusOr<Groups> FindGroups(std::span<const KeyColumn> keys, std::uint64_t rows, const GroupOptions& options) {
  Groups out;
  if (keys.empty()) {
    // No key: every row is the one group (numpy's axis=0, pandas' agg).
    out.of_row.assign(rows, 0);
    out.count = rows == 0 ? 0 : 1;
    if (rows != 0) out.first_row.push_back(0);
    return out;
  }
  // The first column's codes, then each further column's folded in as a
  // digit of a mixed-radix 64-bit number, (number so far) x (the column's
  // distinct values) + (its code), coded once at the end: a direct table
  // when the numbers' range allows, else a hash map. Each column's codes
  // are sorted when the groups are, so the numbers sort as the key tuples
  // do. Only when the next digit would overflow 64 bits are the numbers so
  // far coded (to below the number of rows) before it is added. Coding at
  // every column instead cost a hash map and a sort per column past a
  // direct table's range: the h2o benchmark's six keys (1M rows, about 1M
  // groups) took 2.0-2.2 s to group on a 2-core host.
  absl::StatusOr<Codes> first = CodeKeyColumn(keys[0], rows, options, nullptr);
  if (!first.ok()) return first.status();
  std::vector<std::uint32_t> codes = std::move(first->code);
  std::uint64_t distinct = first->values.size();
  if (keys.size() > 1) {
    std::vector<std::uint64_t> numbers;  // a dropped row's is never read
    ReserveHuge(numbers, rows);
    numbers.assign(codes.begin(), codes.end());
    std::uint64_t radix = distinct;
    // The rows' codes where some row was dropped (kNoGroup), for the steps
    // that skip such rows; null where none was, so that they take their
    // loops without a test per row.
    const auto drops = [](const std::vector<std::uint32_t>& c) -> const std::vector<std::uint32_t>* {
      return std::find(c.begin(), c.end(), kNoGroup) != c.end() ? &c : nullptr;
    };
    const auto code_numbers = [&](const std::vector<std::uint32_t>& alive) -> absl::Status {
      const auto number = [&](std::uint64_t r, bool& na) {
        na = false;
        return numbers[r];
      };
      absl::StatusOr<Codes> coded;
      if (FitsDense(radix, rows)) {
        coded = CodeDense(rows, radix, number, options, drops(alive));
      } else {
        // A hash map while the distinct numbers are few (a sort of every
        // row's number would cost more), a sort of the rows' numbers past
        // that where the groups are sorted.
        const bool may_sort = options.sort && rows <= std::numeric_limits<std::uint32_t>::max();
        coded = CodeColumn(rows, number, options, drops(alive),
                           may_sort ? GroupPolicy::kSortPastDistinct : std::numeric_limits<std::uint64_t>::max());
        if (coded.ok() && coded->stopped) {
          coded = CodeBySort(rows, [&](std::uint64_t r) { return numbers[r]; }, options, drops(alive));
        } else if (coded.ok() && options.sort) {
          SortCodes(*coded, [](std::uint64_t v) { return v; });
        }
      }
      if (!coded.ok()) return coded.status();
      codes = std::move(coded->code);
      distinct = coded->values.size();
      for (std::uint64_t r = 0; r < rows; ++r) numbers[r] = codes[r];
      radix = distinct;
      return absl::OkStatus();
    };
    for (std::size_t k = 1; k < keys.size(); ++k) {
      // kNoGroup in next->code: the row was dropped by this column or an
      // earlier one.
      absl::StatusOr<Codes> next = CodeKeyColumn(keys[k], rows, options, drops(codes));
      if (!next.ok()) return next.status();
      const std::uint64_t width = std::max<std::uint64_t>(1, next->values.size());
      if (radix > std::numeric_limits<std::uint64_t>::max() / width) {
        if (absl::Status s = code_numbers(codes); !s.ok()) return s;
      }
      for (std::uint64_t r = 0; r < rows; ++r) {
        if (next->code[r] != kNoGroup) numbers[r] = numbers[r] * width + next->code[r];
      }
      radix *= width;
      codes = std::move(next->code);
    }
    if (absl::Status s = code_numbers(codes); !s.ok()) return s;
  }
  out.count = distinct;
  out.of_row = std::move(codes);
  out.first_row.assign(distinct, ~std::uint64_t{0});
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::uint32_t g = out.of_row[r];
    if (g != kNoGroup && out.first_row[g] == ~std::uint64_t{0}) out.first_row[g] = r;
  }
  return out;
}

}  // namespace tally::grouping
