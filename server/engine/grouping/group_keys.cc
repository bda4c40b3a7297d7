#include "server/engine/grouping/group_keys.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <string>

#include "absl/container/flat_hash_map.h"
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
};

absl::Status TooManyGroups(std::uint64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat("the keys make more than ", limit,
                                                   " groups (the server's --max_groups)."));
}

// Keys the caller has widened to canonical bits, with their NA flags, coded
// in first-seen order. Integer keys within a small range use a direct table;
// others a hash map.
template <typename Canon>
absl::StatusOr<Codes> CodeColumn(std::uint64_t rows, Canon canon, const GroupOptions& options,
                                 const std::vector<std::uint32_t>* dropped) {
  Codes out;
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
      out.values.push_back(v);
      if (out.values.size() > options.max_groups) return TooManyGroups(options.max_groups);
    }
    out.code[r] = at->second;
  }
  return out;
}

// Renumbers `codes` so that the values come in ascending order (`less`
// compares two canonical values), NA last.
template <typename Less>
void SortCodes(Codes& codes, Less less) {
  const std::size_t n = codes.values.size();
  std::vector<std::uint32_t> by_rank(n);
  std::iota(by_rank.begin(), by_rank.end(), 0u);
  std::sort(by_rank.begin(), by_rank.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (a == codes.na || b == codes.na) return b == codes.na && a != codes.na;
    return less(codes.values[a], codes.values[b]);
  });
  std::vector<std::uint32_t> rank(n);
  for (std::uint32_t i = 0; i < n; ++i) rank[by_rank[i]] = i;
  for (std::uint32_t& c : codes.code) {
    if (c != kNoGroup) c = rank[c];
  }
  std::vector<std::uint64_t> values(n);
  for (std::uint32_t i = 0; i < n; ++i) values[i] = codes.values[by_rank[i]];
  codes.values = std::move(values);
  if (codes.na != kNoGroup) codes.na = static_cast<std::uint32_t>(n - 1);
}

// How two canonical values of `dtype` compare.
bool CanonLess(DType dtype, std::uint64_t a, std::uint64_t b) {
  if (rules::IsFloat(dtype)) return std::bit_cast<double>(a) < std::bit_cast<double>(b);
  if (rules::IsSigned(dtype)) return static_cast<std::int64_t>(a) < static_cast<std::int64_t>(b);
  return a < b;
}

absl::StatusOr<Codes> CodeKeyColumn(const KeyColumn& column, std::uint64_t rows, const GroupOptions& options,
                                    const std::vector<std::uint32_t>* dropped) {
  return rules::VisitDType(column.dtype, [&](auto d) -> absl::StatusOr<Codes> {
    using T = typename rules::Traits<decltype(d)::value>::value;
    const std::byte* data = column.data.data();
    const ArraySpec mask{.dtype = column.dtype, .length = rows, .validity = column.validity};
    absl::StatusOr<Codes> codes = CodeColumn(
        rows,
        [&](std::uint64_t r, bool& na) {
          const std::uint64_t bits = KeyBits<T>(data + r * sizeof(T));
          na = !mask.Valid(r) || (rules::agg::kFloatElement<T> && bits == kNanBits);
          return bits;
        },
        options, dropped);
    if (codes.ok() && options.sort) {
      SortCodes(*codes, [&](std::uint64_t a, std::uint64_t b) { return CanonLess(column.dtype, a, b); });
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
  // The first column's codes, then each further column's combined with
  // them: (code so far) x (the column's distinct values) + (its code) is a
  // 64-bit number, coded again, so every step's codes stay below the number
  // of rows. Each column's codes are sorted when the groups are, so the
  // combined numbers sort as the key tuples do.
  absl::StatusOr<Codes> first = CodeKeyColumn(keys[0], rows, options, nullptr);
  if (!first.ok()) return first.status();
  std::vector<std::uint32_t> codes = std::move(first->code);
  std::uint64_t distinct = first->values.size();
  for (std::size_t k = 1; k < keys.size(); ++k) {
    absl::StatusOr<Codes> next = CodeKeyColumn(keys[k], rows, options, &codes);
    if (!next.ok()) return next.status();
    const std::uint64_t width = next->values.size();
    absl::StatusOr<Codes> combined = CodeColumn(
        rows,
        [&](std::uint64_t r, bool& na) {
          na = false;
          return std::uint64_t{codes[r]} * width + next->code[r];
        },
        options, &next->code);  // kNoGroup there: dropped by this column or an earlier one
    if (!combined.ok()) return combined.status();
    if (options.sort) SortCodes(*combined, [](std::uint64_t a, std::uint64_t b) { return a < b; });
    codes = std::move(combined->code);
    distinct = combined->values.size();
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
