// The exact sum of floating-point values, whatever their order or how they
// were split: a fixed-point integer over the whole float64 range, rounded
// once at the end. Float16, bfloat16 and float32 values are exact doubles,
// so one accumulator serves every float dtype.
//
// Why exact rather than compensated: an exact sum is the same integer
// whichever order the elements come in and however they were split into
// chunks, shards, GPUs or Dask partitions, so every path gives the same bits
// (and the correctly rounded ones: math.fsum's). Compensated or pairwise
// sums only reduce the error, and a different order still moves the last
// bits.
//
// The value is sum(digit[k] * 2^(32k - 1074)): 2^-1074 is float64's
// smallest subnormal, so every finite double is an integer number of units.
// A double's 53-bit significand, shifted to its place, touches at most three
// 32-bit digits; each digit is an int64, so it absorbs 2^31 such additions
// before a carry must move its excess up (Carry, every kAddsBeforeCarry
// additions). 68 digits reach 2^1102: past float64's 2^1024 by 2^78, room
// for more additions than any count of elements.
//
// Infinities and NaNs are counted apart (the sum is NaN with a NaN, or with
// both infinities; else the infinity), and so is whether any element was
// other than -0.0: a zero sum is -0.0 only when every element was -0.0, as
// IEEE addition and numpy give it (math.fsum gives 0.0 there).
//
// Plain C++ and CUDA device code alike (hd.h); the bytes of a partial state
// (ExactSumBytes, ExactSumFromBytes) are host code.
#pragma once

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tally/rules/half.h"
#include "tally/rules/hd.h"

namespace tally::rules {

// A binary floating-point format, for rounding to it: significand bits
// (with the leading one) and the exponents of its smallest and largest
// normal numbers.
struct FloatFormat {
  int precision;
  int min_exponent;
  int max_exponent;
};
inline constexpr FloatFormat kFloat64Format{53, -1022, 1023};
inline constexpr FloatFormat kFloat32Format{24, -126, 127};
inline constexpr FloatFormat kFloat16Format{11, -14, 15};
inline constexpr FloatFormat kBFloat16Format{8, -126, 127};

class ExactSum {
 public:
  static constexpr int kDigits = 68;
  static constexpr int kDigitBits = 32;
  // Below 2^31 additions of less than 2^32 each: no digit can overflow.
  static constexpr std::uint32_t kAddsBeforeCarry = std::uint32_t{1} << 30;

  TALLY_HD ExactSum() { Clear(); }

  TALLY_HD void Clear() {
    for (int k = 0; k < kDigits; ++k) digit_[k] = 0;
    adds_ = 0;
    count_ = nan_ = positive_inf_ = negative_inf_ = 0;
    not_negative_zero_ = false;
  }

  // A finite, non-zero x as digit parts: x = sum(part[i] * 2^(32 (first +
  // i) - 1074)), each part of magnitude below 2^32 and x's sign. False for
  // zeros, infinities and NaN (Add counts those).
  struct Placed {
    int first;
    std::int64_t part[3];
  };
  TALLY_HD static bool Place(double x, Placed& out) {
    const std::uint64_t bits = detail::BitsOfDouble(x);
    const int e = static_cast<int>((bits >> 52) & 0x7ff);
    const std::uint64_t fraction = bits & ((std::uint64_t{1} << 52) - 1);
    if (e == 0x7ff || (e == 0 && fraction == 0)) return false;
    // value = m * 2^(e - 1075) for normal numbers, fraction * 2^-1074 for
    // subnormals: m at bit p of the integer of units of 2^-1074.
    const std::uint64_t m = e != 0 ? (fraction | (std::uint64_t{1} << 52)) : fraction;
    const int p = e != 0 ? e - 1 : 0;
    const int s = p & 31;
    const auto low = static_cast<std::int64_t>((m << s) & 0xffffffffu);
    const auto mid = static_cast<std::int64_t>((m >> (32 - s)) & 0xffffffffu);
    const auto high = static_cast<std::int64_t>(s != 0 ? m >> (64 - s) : 0);
    const bool negative = (bits >> 63) != 0;
    out.first = p >> 5;
    out.part[0] = negative ? -low : low;
    out.part[1] = negative ? -mid : mid;
    out.part[2] = negative ? -high : high;
    return true;
  }

  TALLY_HD void Add(double x) {
    ++count_;
    Placed placed;
    if (!Place(x, placed)) {
      CountSpecial(x);
      return;
    }
    not_negative_zero_ = true;
    digit_[placed.first] += placed.part[0];
    digit_[placed.first + 1] += placed.part[1];
    digit_[placed.first + 2] += placed.part[2];
    if (++adds_ == kAddsBeforeCarry) Carry();
  }

  // A value's units without counting it as an element (a part of a sum
  // kept elsewhere: ExactAccumulator); zeros add nothing. Finite only.
  TALLY_HD void AddValue(double x) {
    Placed placed;
    if (!Place(x, placed)) return;
    digit_[placed.first] += placed.part[0];
    digit_[placed.first + 1] += placed.part[1];
    digit_[placed.first + 2] += placed.part[2];
    if (++adds_ == kAddsBeforeCarry) Carry();
  }
  // Counts `elements` added through AddValue, and whether any was other
  // than -0.0.
  TALLY_HD void NoteElements(std::uint64_t elements, bool other_than_negative_zero) {
    count_ += elements;
    not_negative_zero_ = not_negative_zero_ || other_than_negative_zero;
  }

  // The value kept, the elements it covers forgotten (ExactAccumulator::AddValueOf).
  TALLY_HD void ForgetElements() {
    count_ = 0;
    not_negative_zero_ = false;
  }

  // NaNs and infinities counted elsewhere (a GPU pass's), as Add counts them.
  TALLY_HD void NoteSpecials(std::uint64_t nan, std::uint64_t positive_inf, std::uint64_t negative_inf) {
    count_ += nan + positive_inf + negative_inf;
    nan_ += nan;
    positive_inf_ += positive_inf;
    negative_inf_ += negative_inf;
    if (nan + positive_inf + negative_inf != 0) not_negative_zero_ = true;
  }

  // Digits summed elsewhere (a GPU block's, each below 2^62 in size), the
  // finite elements they cover and whether any of those was other than
  // -0.0. Infinities and NaNs are added one by one (Add).
  TALLY_HD void AddDigits(const std::int64_t* digits, std::uint64_t elements, bool other_than_negative_zero) {
    Carry();
    for (int k = 0; k < kDigits; ++k) digit_[k] += digits[k];
    Carry();
    count_ += elements;
    not_negative_zero_ = not_negative_zero_ || other_than_negative_zero;
  }

  // The elements of `later` added to these (any order gives the same sum).
  TALLY_HD void Merge(const ExactSum& later) {
    ExactSum b = later;
    b.Carry();
    Carry();
    for (int k = 0; k < kDigits; ++k) digit_[k] += b.digit_[k];
    adds_ = 2;  // every digit below 2^33 in size: two additions' worth
    count_ += b.count_;
    nan_ += b.nan_;
    positive_inf_ += b.positive_inf_;
    negative_inf_ += b.negative_inf_;
    not_negative_zero_ = not_negative_zero_ || b.not_negative_zero_;
  }

  // Moves each digit's excess over 32 bits into the next: digits 0-66 end in
  // [0, 2^32), the top one keeps the sign. The value does not change.
  TALLY_HD void Carry() {
    for (int k = 0; k + 1 < kDigits; ++k) {
      const std::int64_t up = digit_[k] >> kDigitBits;  // floor(digit / 2^32)
      digit_[k] = static_cast<std::int64_t>(static_cast<std::uint64_t>(digit_[k]) & 0xffffffffu);
      digit_[k + 1] += up;
    }
    adds_ = 0;
  }

  // The sum rounded once, to nearest with ties to even, to `format`; the
  // result is a double that the format represents exactly (or an infinity).
  TALLY_HD double Rounded(const FloatFormat& format) const {
    if (nan_ != 0 || (positive_inf_ != 0 && negative_inf_ != 0)) return Nan();
    if (positive_inf_ != 0) return Infinity(false);
    if (negative_inf_ != 0) return Infinity(true);
    bool negative = false;
    const ExactSum n = Magnitude(negative);
    const int top = n.TopBit();
    if (top < 0) return count_ != 0 && !not_negative_zero_ ? -0.0 : 0.0;
    // Units of 2^-1074: keep `precision` bits from the top, but none below
    // the format's smallest subnormal.
    const int smallest = format.min_exponent - (format.precision - 1) + 1074;
    int lsb = top - (format.precision - 1);
    if (lsb < smallest) lsb = smallest;
    std::uint64_t kept = 0;
    for (int b = top; b >= lsb; --b) kept = (kept << 1) | n.Bit(b);
    if (lsb > 0 && n.Bit(lsb - 1) != 0 && ((kept & 1) != 0 || n.AnyBelow(lsb - 1))) ++kept;
    // kept * 2^(lsb - 1074), exact in a double: at most 54 bits.
    int top_exponent = lsb - 1074 - 1;
    for (std::uint64_t v = kept; v != 0; v >>= 1) ++top_exponent;
    if (kept != 0 && top_exponent > format.max_exponent) return Infinity(negative);
    const double magnitude = ScaleByPowerOfTwo(static_cast<double>(kept), lsb - 1074);
    return negative ? -magnitude : magnitude;
  }

  TALLY_HD double ToDouble() const { return Rounded(FloatFormat{53, -1022, 1023}); }  // kFloat64Format

  TALLY_HD std::uint64_t count() const { return count_; }

  // Whether some element was a NaN or an infinity (Rounded is then NaN or
  // the infinity).
  TALLY_HD bool HasSpecials() const { return nan_ != 0 || positive_inf_ != 0 || negative_inf_ != 0; }

  // The value's magnitude in units of 2^-1074 as 32-bit digits from its
  // lowest non-zero one (digit `first`, worth 2^(32 first - 1074)) up,
  // none zero at either end (none for 0); `negative` its sign. For
  // arithmetic on exact sums beyond adding them (exact_moments.h).
  std::vector<std::uint32_t> MagnitudeDigits(bool& negative, int& first) const {
    const ExactSum n = Magnitude(negative);
    int last = kDigits - 1;
    while (last >= 0 && n.digit_[last] == 0) --last;
    first = 0;
    while (first <= last && n.digit_[first] == 0) ++first;
    std::vector<std::uint32_t> out;
    for (int k = first; k <= last; ++k) out.push_back(static_cast<std::uint32_t>(n.digit_[k]));
    if (out.empty()) first = 0;
    return out;
  }

  // The state's canonical bytes: the same elements, however added, split
  // and merged, give the same bytes (version 1; see ExactSumBytes).
  std::string Bytes() const;
  static std::optional<ExactSum> FromBytes(std::string_view bytes);

  bool operator==(const ExactSum& o) const { return Bytes() == o.Bytes(); }

 private:
  // A zero, an infinity or a NaN (count_ already counts it).
  TALLY_HD void CountSpecial(double x) {
    const std::uint64_t bits = detail::BitsOfDouble(x);
    const bool negative = (bits >> 63) != 0;
    if (((bits >> 52) & 0x7ff) != 0x7ff) {  // a zero
      if (!negative) not_negative_zero_ = true;
      return;
    }
    if ((bits & ((std::uint64_t{1} << 52) - 1)) != 0) {
      ++nan_;
    } else if (negative) {
      ++negative_inf_;
    } else {
      ++positive_inf_;
    }
    not_negative_zero_ = true;
  }

  TALLY_HD static double FromBits(std::uint64_t bits) {
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  TALLY_HD static double Nan() { return FromBits(0x7ff8000000000000u); }
  TALLY_HD static double Infinity(bool negative) {
    return FromBits(negative ? 0xfff0000000000000u : 0x7ff0000000000000u);
  }

  // v * 2^exponent for v below 2^54 and a result that is a double: exact.
  TALLY_HD static double ScaleByPowerOfTwo(double v, int exponent) {
    while (exponent > 0) {
      const int step = exponent > 1000 ? 1000 : exponent;
      v *= PowerOfTwo(step);
      exponent -= step;
    }
    while (exponent < 0) {
      // Steps of at most 2^-1000 while v stays normal, so only the last
      // step can land in the subnormals, where the product is still exact
      // (v's bits lie on the subnormal grid by construction).
      const int step = exponent < -1000 ? -1000 : exponent;
      v *= PowerOfTwo(step);
      exponent -= step;
    }
    return v;
  }
  // 2^e for e in [-1022, 1023].
  TALLY_HD static double PowerOfTwo(int e) { return FromBits(static_cast<std::uint64_t>(e + 1023) << 52); }

  // The value's magnitude, carried (every digit in [0, 2^32)), and its sign.
  TALLY_HD ExactSum Magnitude(bool& negative) const {
    ExactSum n = *this;
    n.Carry();
    negative = n.digit_[kDigits - 1] < 0;
    if (negative) {
      for (int k = 0; k < kDigits; ++k) n.digit_[k] = -n.digit_[k];
      n.Carry();
    }
    return n;
  }

  // After Carry on a non-negative value: every digit is in [0, 2^32) but
  // the top one, which is below 2^18 for any sum of fewer than 2^64 doubles.
  TALLY_HD std::uint64_t Bit(int b) const {
    if (b < 0 || b >= kDigits * kDigitBits) return 0;
    return (static_cast<std::uint64_t>(digit_[b >> 5]) >> (b & 31)) & 1u;
  }
  TALLY_HD bool AnyBelow(int b) const {
    for (int k = 0; k < (b >> 5); ++k) {
      if (digit_[k] != 0) return true;
    }
    return (static_cast<std::uint64_t>(digit_[b >> 5]) & ((std::uint64_t{1} << (b & 31)) - 1)) != 0;
  }
  TALLY_HD int TopBit() const {
    for (int k = kDigits - 1; k >= 0; --k) {
      if (digit_[k] == 0) continue;
      int b = 63;
      while (((static_cast<std::uint64_t>(digit_[k]) >> b) & 1u) == 0) --b;
      return k * kDigitBits + b;
    }
    return -1;
  }

  std::int64_t digit_[kDigits];
  std::uint32_t adds_;
  std::uint64_t count_;
  std::uint64_t nan_;
  std::uint64_t positive_inf_;
  std::uint64_t negative_inf_;
  bool not_negative_zero_;
};

// Version 1 of the bytes (little-endian): u8 version, u64 count, u64 NaNs,
// u64 +inf, u64 -inf, u8 flags (1: an element other than -0.0 was seen; 2:
// the value is negative), u16 first digit, u16 digits, then that many u32
// digits of the value's magnitude, lowest first, none of them zero at
// either end. Zero has no digits.
inline std::string ExactSum::Bytes() const {
  bool negative = false;
  const ExactSum n = Magnitude(negative);
  int first = 0;
  int last = kDigits - 1;
  while (last >= 0 && n.digit_[last] == 0) --last;
  while (first <= last && n.digit_[first] == 0) ++first;
  std::string out;
  auto put = [&out](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(1, 1);
  put(count_, 8);
  put(nan_, 8);
  put(positive_inf_, 8);
  put(negative_inf_, 8);
  put((not_negative_zero_ ? 1u : 0u) | (negative && last >= 0 ? 2u : 0u), 1);
  const int digits = last >= first ? last - first + 1 : 0;
  put(static_cast<std::uint64_t>(digits != 0 ? first : 0), 2);
  put(static_cast<std::uint64_t>(digits), 2);
  for (int k = 0; k < digits; ++k) put(static_cast<std::uint64_t>(n.digit_[first + k]), 4);
  return out;
}

inline std::optional<ExactSum> ExactSum::FromBytes(std::string_view bytes) {
  std::size_t at = 0;
  auto get = [&](int size) -> std::optional<std::uint64_t> {
    if (bytes.size() - at < static_cast<std::size_t>(size)) return std::nullopt;
    std::uint64_t v = 0;
    for (int i = 0; i < size; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    at += static_cast<std::size_t>(size);
    return v;
  };
  const auto version = get(1);
  if (!version || *version != 1) return std::nullopt;
  ExactSum s;
  const auto count = get(8), nan = get(8), pinf = get(8), ninf = get(8), flags = get(1), first = get(2),
             digits = get(2);
  if (!count || !nan || !pinf || !ninf || !flags || !first || !digits) return std::nullopt;
  if ((*flags & ~3u) != 0 || *first + *digits > kDigits || (*digits == 0 && (*first != 0 || (*flags & 2u) != 0))) {
    return std::nullopt;
  }
  s.count_ = *count;
  s.nan_ = *nan;
  s.positive_inf_ = *pinf;
  s.negative_inf_ = *ninf;
  s.not_negative_zero_ = (*flags & 1u) != 0;
  for (std::uint64_t k = 0; k < *digits; ++k) {
    const auto d = get(4);
    if (!d) return std::nullopt;
    if ((k == 0 || k + 1 == *digits) && *d == 0) return std::nullopt;  // not canonical
    s.digit_[*first + k] = static_cast<std::int64_t>(*d);
  }
  if (at != bytes.size()) return std::nullopt;
  if ((*flags & 2u) != 0) {
    for (int k = 0; k < kDigits; ++k) s.digit_[k] = -s.digit_[k];
  }
  return s;
}

// s + c = x + y exactly, with s = fl(x + y) (Knuth's TwoSum; no FMA can be
// contracted into it: host code builds with -ffp-contract=off).
inline double TwoSum(double x, double y, double& s) {
  s = x + y;
  const double y_part = s - x;
  const double x_part = s - y_part;
  return (x - x_part) + (y - y_part);
}

// The exact sum kept small for the host's per-block and per-row work: three
// float64s s, c and d whose sum is exact (TwoSum: c takes s's errors, d
// c's), and an ExactSum on the heap only for what does not fit them (an
// error of d's, a sum past float64's range, an infinity, a NaN), which
// typical data never makes. d is for float64 squares: a block's x * x and
// FMA errors span about 150 bits, past two float64s, and spilling every
// block's into an ExactSum cost a third of the squares' pass. The same value
// however it was added and merged, so the same rounding: the answer is
// ExactSum's.
class ExactAccumulator {
 public:
  ExactAccumulator() = default;
  ExactAccumulator(const ExactAccumulator& o)
      : s_(o.s_), c_(o.c_), d_(o.d_), count_(o.count_), other_(o.other_),
        spill_(o.spill_ ? std::make_unique<ExactSum>(*o.spill_) : nullptr) {}
  ExactAccumulator& operator=(const ExactAccumulator& o) {
    if (this != &o) *this = ExactAccumulator(o);
    return *this;
  }
  ExactAccumulator(ExactAccumulator&&) noexcept = default;
  ExactAccumulator& operator=(ExactAccumulator&&) noexcept = default;

  // A block of `elements` whose exact sum is high + low (two exact float64
  // partial sums); `any_other` tells, when both are zero, whether some
  // element was other than -0.0 (asked only then).
  template <typename AnyOther>
  void AddBlock(double high, double low, std::uint64_t elements, const AnyOther& any_other) {
    count_ += elements;
    if (high == 0.0 && low == 0.0) {
      if (!other_ && elements != 0 && any_other()) other_ = true;
      return;
    }
    other_ = true;
    AddExact(high);
    AddExact(low);
  }

  void AddElement(double x) {
    ++count_;
    if (x == 0.0) {
      if (!std::signbit(x)) other_ = true;
      return;
    }
    other_ = true;
    if (!std::isfinite(x)) {
      Spill().Add(x);
      return;
    }
    AddExact(x);
  }

  // `elements` integers whose exact sum is the sum of the exact doubles
  // that parts(put) puts (rules::IntegerSums' PutSum or PutSquares); no
  // integer is -0.0, so a zero sum is 0.0.
  template <typename Parts>
  void AddIntegers(std::uint64_t elements, const Parts& parts) {
    if (elements == 0) return;
    count_ += elements;
    other_ = true;
    parts([this](double part) { AddExact(part); });
  }

  // Elements 0 to n - 1 straight into the ExactSum, each where `take(i, v)`
  // sets v and returns true: for blocks the split cannot sum.
  template <typename Take>
  void AddElements(std::size_t n, const Take& take) {
    ExactSum& sum = Spill();
    const std::uint64_t before = sum.count();
    double v = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (take(i, v)) sum.Add(v);
    }
    count_ += sum.count() - before;
  }

  // The value of `more` added, not its elements: a second part of the same
  // elements' values (a float64 square's low half, whose high half counted
  // them). `more` holds finite values only.
  void AddValueOf(const ExactAccumulator& more) {
    AddExact(more.s_);
    AddExact(more.c_);
    AddExact(more.d_);
    if (more.spill_) {
      ExactSum value = *more.spill_;
      value.ForgetElements();
      Spill().Merge(value);
    }
  }

  // The elements of `later` (any order gives the same value).
  void Merge(const ExactAccumulator& later) {
    if (later.count_ == 0) return;  // most folds of plans without a float sum
    count_ += later.count_;
    other_ = other_ || later.other_;
    AddExact(later.s_);
    AddExact(later.c_);
    AddExact(later.d_);
    if (later.spill_) Spill().Merge(*later.spill_);
  }

  std::uint64_t count() const { return count_; }

  ExactSum ToExactSum() const {
    ExactSum sum = spill_ ? *spill_ : ExactSum();
    sum.AddValue(s_);
    sum.AddValue(c_);
    sum.AddValue(d_);
    sum.NoteElements(count_ - (spill_ ? spill_->count() : 0), other_);
    return sum;
  }

  // Rounded once to `format` (ExactSum::Rounded), without building the
  // ExactSum where s alone is the exact value and the format is float64 or
  // float32 (one IEEE conversion rounds it once).
  double Rounded(const FloatFormat& format) const {
    if (!spill_ && c_ == 0.0 && d_ == 0.0 && (format.precision == 53 || format.precision == 24)) {
      if (s_ == 0.0) return count_ != 0 && !other_ ? -0.0 : 0.0;
      return format.precision == 53 ? s_ : static_cast<double>(static_cast<float>(s_));
    }
    return ToExactSum().Rounded(format);
  }

 private:
  void AddExact(double x) {
    double t = 0.0;
    const double e = TwoSum(s_, x, t);
    if (!(std::fabs(t) <= std::numeric_limits<double>::max())) {
      // s + x past float64's range: x goes to the ExactSum, whose digits
      // reach 2^1102, so sums near overflow stay exact (and round to the
      // infinity only where the exact sum does).
      Spill().AddValue(x);
      return;
    }
    s_ = t;
    if (e == 0.0) return;
    const double e2 = TwoSum(c_, e, t);
    c_ = t;
    if (e2 == 0.0) return;
    const double e3 = TwoSum(d_, e2, t);
    d_ = t;
    if (e3 != 0.0) Spill().AddValue(e3);
  }
  ExactSum& Spill() {
    if (!spill_) spill_ = std::make_unique<ExactSum>();
    return *spill_;
  }

  double s_ = 0.0;
  double c_ = 0.0;
  double d_ = 0.0;
  std::uint64_t count_ = 0;
  bool other_ = false;  // an element other than -0.0
  std::unique_ptr<ExactSum> spill_;
};

}  // namespace tally::rules
