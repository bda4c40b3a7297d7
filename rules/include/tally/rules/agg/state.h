// The steps of an aggregate function whose state the registry's own code
// keeps: exact quantiles and medians (holistic: the state is the values),
// the k largest and smallest, and sketches of fixed size. A function
// declares its state and how it is initialised, updated over a block of
// elements, combined with the state of the elements that follow, finalised
// into the answer, and written to and read from bytes. Every backend's
// host path, the merge of a dataset's shards and the C++ client run these
// same steps, so a state is the same bytes whichever of them built it.
//
// Host-only C++: the GPU runs these functions through its own passes
// (docs/architecture.md).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tally/rules/dtype.h"
#include "tally/rules/half.h"
#include "tally/rules/op.h"

namespace tally::rules::agg {

// One row's next elements, as an update reads them: `count` little-endian
// elements of the plan's dtype at `data`, the first at position `first` of
// the row. `valid`, when not null, holds the validity bits: element i is
// valid when bit (valid_bit + i) of the words is 1.
struct Elements {
  const std::byte* data = nullptr;
  std::uint64_t count = 0;
  std::uint64_t first = 0;
  const std::uint32_t* valid = nullptr;
  std::uint64_t valid_bit = 0;

  bool Valid(std::uint64_t i) const {
    if (valid == nullptr) return true;
    const std::uint64_t b = valid_bit + i;
    return ((valid[b >> 5] >> (b & 31)) & 1u) != 0;
  }
  template <typename T>
  T At(std::uint64_t i) const {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    return v;
  }
};

// One row's answer. Which vector holds the values follows the function's
// result kind for the dtype (ResultKindOf); `indices` are the positions of
// the values topk and bottomk answer, offset by OpSpec::base_index.
struct RowAnswer {
  std::vector<double> doubles;
  std::vector<std::int64_t> int64s;
  std::vector<std::uint64_t> uint64s;
  std::vector<std::int64_t> indices;

  bool operator==(const RowAnswer&) const = default;
};

// A function's state over some elements of one row, with the steps that
// work on it. Each function's state is a class of its own (one per dtype
// where it keeps elements), made by its StateFunction::Init.
class State {
 public:
  virtual ~State() = default;
  // Memory the state holds, for the server's budget of holistic states.
  virtual std::uint64_t bytes() const = 0;
  // Adds elements.
  virtual void Update(const Elements& elements) = 0;
  // Adds `later`'s elements (the ones after this state's in the row; the
  // order matters to no function here, but the contract keeps it). `later`
  // was made by Init of the same op and dtype.
  virtual void Combine(const State& later) = 0;
  // The answer; a sentence when the row has none (numpy raises). May
  // reorder what the state holds, not what it means.
  virtual std::optional<std::string> Finalize(RowAnswer& out) = 0;
  // The state's bytes: the same elements give the same bytes, however they
  // were split and combined.
  virtual void Serialize(std::string& out) = 0;
  // Replaces the state by one Serialize wrote; a sentence naming what does
  // not match (function, dtype, parameters) or is malformed.
  virtual std::optional<std::string> Deserialize(std::string_view bytes) = 0;
};

// A family's states, as the registry's Function::state names them. The
// steps are compiled once, in the family's file of rules/src/agg/, not in
// every file that includes the registry: the state classes are templates
// over 13 dtypes, and instantiating them wherever the registry is read
// doubled the build's time.
class StateFunction {
 public:
  using Maker = std::unique_ptr<State> (*)(const OpSpec& op, DType dtype);
  constexpr explicit StateFunction(Maker make) : make_(make) {}
  // The empty state of `op` (already checked: CheckParams) over `dtype`.
  std::unique_ptr<State> Init(const OpSpec& op, DType dtype) const { return make_(op, dtype); }

 private:
  Maker make_;
};

// The byte order of serialised states: little-endian fixed-width fields,
// as every host tally builds for.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void PutBytes(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }

 private:
  std::string& out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T& v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(&v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetBytes(void* p, std::size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  std::size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

// Every serialised state starts with this header: a magic number, the
// format's version, the function's wire number, the dtype and a digest of
// the parameters, so that a state is never merged into another function's
// or another parameter's (the caller names which of them differs).
inline constexpr std::uint32_t kStateMagic = 0x54534154;  // "TATS" read little-endian
inline constexpr std::uint16_t kStateFormat = 1;

// A digest of the parameters a state depends on (FNV-1a over their bits).
inline std::uint64_t ParamsDigest(const OpSpec& op) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(op.q.size());
  for (const double q : op.q) mix(std::bit_cast<std::uint64_t>(q));
  mix(static_cast<std::uint64_t>(op.method));
  mix(op.k);
  mix(op.precision);
  mix(std::bit_cast<std::uint64_t>(op.relative_accuracy));
  return h;
}

inline void PutHeader(Writer& w, int wire, DType dtype, const OpSpec& op) {
  w.Put(kStateMagic);
  w.Put(kStateFormat);
  w.Put(static_cast<std::uint16_t>(wire));
  w.Put(static_cast<std::uint8_t>(dtype));
  w.Put(ParamsDigest(op));
}

// Reads and checks the header; a sentence on a mismatch.
inline std::optional<std::string> CheckHeader(Reader& r, int wire, std::string_view name, DType dtype,
                                              const OpSpec& op) {
  std::uint32_t magic = 0;
  std::uint16_t format = 0, function = 0;
  std::uint8_t d = 0;
  std::uint64_t digest = 0;
  if (!r.Get(magic) || !r.Get(format) || !r.Get(function) || !r.Get(d) || !r.Get(digest) ||
      magic != kStateMagic) {
    return std::string("function_state: not a serialised state (bad header).");
  }
  if (format != kStateFormat) {
    return "function_state: format version " + std::to_string(format) + ", this build reads " +
           std::to_string(kStateFormat) + ".";
  }
  if (function != wire) {
    std::string out = "function_state: a state of function number ";
    out.append(std::to_string(function)).append(", not of ").append(name).append(".");
    return out;
  }
  if (d != static_cast<std::uint8_t>(dtype)) {
    std::string out = "function_state: a state of dtype ";
    out.append(d < std::size(kAllDTypes) ? Name(static_cast<DType>(d)) : "unknown")
        .append(", not of ")
        .append(Name(dtype))
        .append(".");
    return out;
  }
  if (digest != ParamsDigest(op)) {
    std::string out = "function_state: a state of ";
    out.append(name).append(" with other parameters (q, method, k, precision or relative_accuracy).");
    return out;
  }
  return std::nullopt;
}

inline std::string Truncated(std::string_view name) {
  std::string out = "function_state: the ";
  out.append(name).append(" state is truncated or malformed.");
  return out;
}

// Whether T is one of the float element types (float16 and bfloat16 are
// structs of their bits, tally/rules/half.h).
template <typename T>
inline constexpr bool kFloatElement =
    std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// A float element as float64 (exact for every float dtype).
template <typename T>
double Widen(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// A value's identity for distinct counts and sketches: the element's bits
// as a 64-bit number, float dtypes widened to float64 with -0.0 as 0.0 and
// every NaN as one (numpy.unique counts NaN once), integers as int64 or
// uint64.
template <typename T>
std::uint64_t CanonicalBits(T v) {
  if constexpr (kFloatElement<T>) {
    double d = Widen(v);
    if (d != d) return 0x7ff8000000000000ull;
    if (d == 0) d = 0.0;
    return std::bit_cast<std::uint64_t>(d);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

// The same identity in the fewest bits, as count_distinct keeps it and hll
// hashes it: CanonicalBits for 8-byte dtypes; for the narrower ones 32 bits
// (float dtypes as float32 with -0.0 as 0.0 and every NaN as one, integers
// as int32 or uint32), whose unsigned order is CanonicalBits' order, so a
// sorted set of them widens to a sorted set of CanonicalBits.
template <typename T>
using Id = std::conditional_t<sizeof(T) <= 4, std::uint32_t, std::uint64_t>;

template <typename T>
Id<T> IdOf(T v) {
  if constexpr (sizeof(T) > 4) {
    return CanonicalBits(v);
  } else if constexpr (kFloatElement<T>) {
    float f = static_cast<float>(Widen(v));  // exact: every such dtype is a float32
    if (f != f) return 0x7fc00000u;
    if (f == 0) f = 0.0f;
    return std::bit_cast<std::uint32_t>(f);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<std::uint32_t>(static_cast<std::int32_t>(v));
  } else {
    return static_cast<std::uint32_t>(v);
  }
}

}  // namespace tally::rules::agg
