// tally._states: a function's partial states (tally.proto,
// PartialState.function_state) merged and finished by tally/rules, the
// steps the server and the C++ client run, for the Python package.
// An aggregation arrives as its tally.v1.Aggregation fields (op number, q,
// method, k, precision, relative_accuracy) and a dtype as its tally.v1
// number; errors are ValueError with the rules' sentence.
//
// The other ops with partial states (sum ... ptp, histograms left out) are
// merged and finished in Python (tally/partial.py); merge_state and
// finish_state run rules::Merge and rules::Finish* on PartialState's
// scalar fields, so that tests can hold the Python copy to the rules.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "tally/rules/agg/registry.h"
#include "tally/rules/partial.h"

namespace py = pybind11;
namespace rules = tally::rules;

namespace {

// tally.v1.Aggregation's fields that a function's state depends on.
using WireSpec = std::tuple<int, std::vector<double>, int, std::uint32_t, std::uint32_t, double>;

// The rules' form of an aggregation over a dtype, as the dtype computes it
// (nanquantile of integers keeps quantile's state: rules::AsComputedFor).
struct Spec {
  rules::OpSpec op;
  rules::DType dtype;
};

Spec SpecOf(const WireSpec& wire, int wire_dtype) {
  const auto& [number, q, method, k, precision, relative_accuracy] = wire;
  const rules::agg::Function* f = rules::agg::FindByWire(number);
  if (f == nullptr || f->state == nullptr) {
    throw py::value_error("op number " + std::to_string(number) + " has no function state");
  }
  // tally.proto numbers DType from 1 in the order of rules::kAllDTypes.
  if (wire_dtype < 1 || wire_dtype > static_cast<int>(std::size(rules::kAllDTypes))) {
    throw py::value_error("unknown dtype number " + std::to_string(wire_dtype));
  }
  if (method < 0 || method >= rules::kNumQuantileMethods) {
    throw py::value_error("unknown quantile method number " + std::to_string(method));
  }
  Spec s{.op = {}, .dtype = rules::kAllDTypes[wire_dtype - 1]};
  s.op.kind = f->kind;
  s.op.q = q;
  s.op.method = static_cast<rules::QuantileMethod>(method);
  s.op.k = k;
  s.op.precision = precision;
  s.op.relative_accuracy = relative_accuracy;
  if (std::optional<std::string> bad = rules::agg::CheckParams(s.op)) throw py::value_error(*bad);
  s.op = rules::AsComputedFor(s.op, s.dtype);
  return s;
}

rules::PartialState StateOf(std::uint64_t count, std::uint64_t elements, const py::bytes& state) {
  rules::PartialState s;
  s.count = count;
  s.elements = elements;
  s.function_state = state;
  return s;
}

// The state of a's elements and then b's; ValueError naming the state
// that does not belong (another function, dtype or parameters, or bytes
// that are no state).
py::bytes Merge(const WireSpec& wire, int wire_dtype, const py::bytes& a, const py::bytes& b) {
  const Spec s = SpecOf(wire, wire_dtype);
  const std::string x = a, y = b;
  for (const auto& [which, bytes] : {std::pair{"the first state", &x}, std::pair{"the second state", &y}}) {
    rules::PartialState p;
    p.function_state = *bytes;
    if (std::optional<std::string> bad = rules::CheckFunctionState(s.op, s.dtype, p)) {
      throw py::value_error(std::string(which) + ": " + *bad);
    }
  }
  return py::bytes(rules::MergeFunctionStates(s.op, s.dtype, x, y));
}

template <typename T>
py::array_t<T> Array(const std::vector<T>& v) {
  return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data());
}

// One row's answer from its state: (doubles, int64s, uint64s, indices),
// the vectors of rules::agg::RowAnswer, as the server would send them.
// ValueError for a row with no value (quantile of no element) or a state
// that does not belong.
py::tuple Finish(const WireSpec& wire, int wire_dtype, std::uint64_t count, std::uint64_t elements,
                 const py::bytes& state) {
  const Spec s = SpecOf(wire, wire_dtype);
  const rules::PartialState p = StateOf(count, elements, state);
  if (!rules::HasValue(s.op.kind, s.dtype, p)) {
    throw py::value_error(std::string(rules::Name(s.op.kind)) + " of no elements has no value");
  }
  rules::agg::RowAnswer out;
  if (std::optional<std::string> bad = rules::FinishFunctionState(s.op, s.dtype, p, out)) {
    throw py::value_error(*bad);
  }
  return py::make_tuple(Array(out.doubles), Array(out.int64s), Array(out.uint64s), Array(out.indices));
}

// -- The ops whose states are PartialState's scalar fields ------------------

// tally.v1.PartialState's scalar fields, by their wire names, and where
// rules::PartialState keeps each.
template <typename F>
void ForEachField(F&& f) {
  using S = rules::PartialState;
  f("count", &S::count);
  f("float_sum", &S::float_sum);
  f("int_sum", &S::int_sum);
  f("uint_sum", &S::uint_sum);
  f("sum_squares", &S::sum_squares);
  f("mean", &S::mean);
  f("m2", &S::m2);
  f("float_extreme", &S::float_extreme);
  f("int_extreme", &S::int_extreme);
  f("uint_extreme", &S::uint_extreme);
  f("index", &S::index);
  f("elements", &S::elements);
  f("float_product", &S::float_product);
  f("int_product", &S::int_product);
  f("uint_product", &S::uint_product);
  f("nonzero", &S::nonzero);
  f("float_max", &S::float_max);
  f("int_max", &S::int_max);
  f("uint_max", &S::uint_max);
}

// A state from a dict of those fields (a field left out keeps
// rules::PartialState's default: 0, index -1).
rules::PartialState ScalarStateOf(const py::dict& fields) {
  rules::PartialState s;
  ForEachField([&](const char* name, auto member) {
    using T = std::remove_reference_t<decltype(s.*member)>;
    if (fields.contains(name)) s.*member = fields[name].template cast<T>();
  });
  if (fields.contains("exact_sum")) s.exact_sum = fields["exact_sum"].cast<std::string>();
  if (fields.contains("exact_sum_squares")) s.exact_sum_squares = fields["exact_sum_squares"].cast<std::string>();
  return s;
}

py::dict FieldsOf(const rules::PartialState& s) {
  py::dict out;
  ForEachField([&](const char* name, auto member) { out[name] = s.*member; });
  out["exact_sum"] = py::bytes(s.exact_sum);
  out["exact_sum_squares"] = py::bytes(s.exact_sum_squares);
  return out;
}

// An op with a partial state of scalar fields, over a dtype, as the C++
// client merges and finishes it (client/src/partial.cc: AsComputedFor).
Spec ScalarSpecOf(int number, double ddof, int wire_dtype) {
  const rules::agg::Function* f = rules::agg::FindByWire(number);
  if (f == nullptr || !f->partial_state || f->state != nullptr || f->kind == rules::OpKind::kHistogram) {
    throw py::value_error("op number " + std::to_string(number) + " has no partial state of scalar fields");
  }
  if (wire_dtype < 1 || wire_dtype > static_cast<int>(std::size(rules::kAllDTypes))) {
    throw py::value_error("unknown dtype number " + std::to_string(wire_dtype));
  }
  Spec s{.op = {}, .dtype = rules::kAllDTypes[wire_dtype - 1]};
  s.op.kind = f->kind;
  s.op.ddof = ddof;
  s.op = rules::AsComputedFor(s.op, s.dtype);
  return s;
}

py::dict MergeState(int number, double ddof, int wire_dtype, const py::dict& a, const py::dict& b) {
  const Spec s = ScalarSpecOf(number, ddof, wire_dtype);
  return FieldsOf(rules::Merge(s.op, s.dtype, ScalarStateOf(a), ScalarStateOf(b)));
}

// (result field, value) as the C++ client finishes a state
// (FinishPartials): "doubles" with one canonical NaN, "int64s" or
// "uint64s"; None where the state has no value (rules::HasValue).
py::object FinishState(int number, double ddof, int wire_dtype, const py::dict& fields) {
  const Spec s = ScalarSpecOf(number, ddof, wire_dtype);
  const rules::PartialState p = ScalarStateOf(fields);
  if (!rules::HasValue(s.op.kind, s.dtype, p)) return py::none();
  switch (rules::ResultKindOf(s.op.kind, s.dtype)) {
    case rules::ResultKind::kDouble: {
      const double v = rules::FinishDouble(s.op, s.dtype, p);
      return py::make_tuple("doubles", std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v);
    }
    case rules::ResultKind::kInt64: return py::make_tuple("int64s", rules::FinishInt64(s.op, s.dtype, p));
    case rules::ResultKind::kUInt64: return py::make_tuple("uint64s", rules::FinishUInt64(s.op, s.dtype, p));
    case rules::ResultKind::kHistogram: break;
  }
  throw py::value_error("op number " + std::to_string(number) + " answers a histogram");
}

// The registry's functions with partial states of scalar fields (every
// op with a partial state but histogram and those of function_state), by
// their canonical names.
std::vector<std::string> ScalarStateOps() {
  std::vector<std::string> out;
  for (const rules::agg::Function& f : rules::agg::kFunctions) {
    if (f.partial_state && f.state == nullptr && f.kind != rules::OpKind::kHistogram) out.emplace_back(f.name);
  }
  return out;
}

// Row r's exact sum from its bytes: an ExactSum, or ValueError naming the
// row where the bytes are no state.
rules::ExactSum ExactRow(const py::handle& bytes, std::size_t r, const char* field) {
  std::string_view view = py::cast<std::string_view>(bytes);
  std::optional<rules::ExactSum> sum = rules::ExactSum::FromBytes(view);
  if (!sum.has_value()) throw py::value_error(std::string(field) + ": row " + std::to_string(r) + " is no exact sum");
  return *sum;
}

// Rows' sums merged as rules::Merge merges a row's sum (partial_detail::
// MergeSum): a's exact bytes, or its value as one element where it keeps
// none, followed by b's; every row must keep bytes on one side at least.
// Returns the merged bytes and their values rounded to float64. One call
// for a group-by's states of many groups, where tally._exact's Python steps
// took about 28 us a row (500,000 groups: 14 s).
py::tuple MergeExactSums(const py::sequence& a, const py::array_t<double, py::array::forcecast>& a_values,
                         const py::sequence& b, const py::array_t<double, py::array::forcecast>& b_values) {
  const std::size_t n = py::len(a);
  if (py::len(b) != n || static_cast<std::size_t>(a_values.size()) != n ||
      static_cast<std::size_t>(b_values.size()) != n) {
    throw py::value_error("merge_exact_sums: a, a_values, b and b_values must have one entry a row");
  }
  py::list bytes(n);
  py::array_t<double> values(static_cast<py::ssize_t>(n));
  auto av = a_values.unchecked<1>(), bv = b_values.unchecked<1>();
  auto out = values.mutable_unchecked<1>();
  for (std::size_t r = 0; r < n; ++r) {
    const py::handle x = a[r], y = b[r];
    const bool ax = py::len(x) != 0, by = py::len(y) != 0;
    if (!ax && !by) throw py::value_error("merge_exact_sums: row " + std::to_string(r) + " keeps no exact sum");
    // A side without bytes counts as its value, as the rules' MergeSum has it.
    rules::ExactSum sum = ax ? ExactRow(x, r, "a") : rules::partial_detail::ExactFrom({}, av(r));
    sum.Merge(by ? ExactRow(y, r, "b") : rules::partial_detail::ExactFrom({}, bv(r)));
    const std::string merged = sum.Bytes();
    bytes[r] = py::bytes(merged);
    out(r) = sum.ToDouble();
  }
  return py::make_tuple(bytes, values);
}

// Rows' variance states merged where both sides keep their exact sums and
// sums of squares (rules::Merge for OP_VARIANCE then PutExactMoments):
// the merged sums' bytes, and each row's mean and m2 over `counts`.
py::tuple MergeExactMoments(const py::sequence& a_sum, const py::sequence& a_squares, const py::sequence& b_sum,
                            const py::sequence& b_squares,
                            const py::array_t<std::uint64_t, py::array::forcecast>& counts) {
  const std::size_t n = py::len(a_sum);
  if (py::len(a_squares) != n || py::len(b_sum) != n || py::len(b_squares) != n ||
      static_cast<std::size_t>(counts.size()) != n) {
    throw py::value_error("merge_exact_moments: every argument must have one entry a row");
  }
  py::list sums(n), squares(n);
  py::array_t<double> mean(static_cast<py::ssize_t>(n)), m2(static_cast<py::ssize_t>(n));
  auto c = counts.unchecked<1>();
  auto mean_out = mean.mutable_unchecked<1>(), m2_out = m2.mutable_unchecked<1>();
  for (std::size_t r = 0; r < n; ++r) {
    rules::ExactSum s = ExactRow(a_sum[r], r, "a_sum");
    s.Merge(ExactRow(b_sum[r], r, "b_sum"));
    rules::ExactSum q = ExactRow(a_squares[r], r, "a_squares");
    q.Merge(ExactRow(b_squares[r], r, "b_squares"));
    sums[r] = py::bytes(s.Bytes());
    squares[r] = py::bytes(q.Bytes());
    mean_out(r) = s.ToDouble() / static_cast<double>(c(r));
    m2_out(r) = rules::ExactSecondMoment(s, q, c(r));
  }
  return py::make_tuple(sums, squares, mean, m2);
}

// A protobuf wire reader over one message's bytes (tally.proto's
// PartialStates and PartialState): varints, fixed 64-bit words and
// length-delimited fields, the rest skipped; ValueError where the bytes
// end inside a field.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : at_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return at_ >= end_; }
  std::uint64_t Varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= end_) throw py::value_error("partial states: the bytes end inside a varint");
      const auto byte = static_cast<std::uint8_t>(*at_++);
      v |= std::uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) return v;
    }
    throw py::value_error("partial states: a varint longer than 10 bytes");
  }
  double Fixed64() {
    if (end_ - at_ < 8) throw py::value_error("partial states: the bytes end inside a fixed64");
    double v;
    std::memcpy(&v, at_, 8);
    at_ += 8;
    return v;
  }
  std::string_view Bytes() {
    const std::uint64_t n = Varint();
    if (n > static_cast<std::uint64_t>(end_ - at_)) throw py::value_error("partial states: a field past the end");
    const std::string_view v(at_, n);
    at_ += n;
    return v;
  }
  void Skip(int wire_type) {
    switch (wire_type) {
      case 0: (void)Varint(); return;
      case 1: (void)Fixed64(); return;
      case 2: (void)Bytes(); return;
      case 5:
        if (end_ - at_ < 4) throw py::value_error("partial states: the bytes end inside a fixed32");
        at_ += 4;
        return;
      default: throw py::value_error("partial states: wire type " + std::to_string(wire_type));
    }
  }

 private:
  const char* at_;
  const char* end_;
};

// A serialized tally.v1.PartialStates as columns, one entry a state:
// numpy arrays of PartialState's number fields by name (0 where a state
// leaves one out), lists of its byte fields, and "version" and "dtype";
// None where a state holds a histogram (those take the package's own
// reading). The fields the Python package read one state at a time: 0.05 s
// a field for 500,000 groups.
py::object PartialColumns(const py::bytes& serialized) {
  enum Kind { kU64, kI64, kF64, kBytes };
  struct Field {
    const char* name;
    Kind kind;
  };
  // By field number (tally.proto, PartialState); histogram (12) is not one.
  static constexpr Field kFields[24] = {
      {nullptr, kU64},        {"count", kU64},         {"float_sum", kF64},     {"int_sum", kI64},
      {"uint_sum", kU64},     {"sum_squares", kF64},   {"mean", kF64},          {"m2", kF64},
      {"float_extreme", kF64}, {"int_extreme", kI64},  {"uint_extreme", kU64},  {"index", kI64},
      {nullptr, kU64},        {"elements", kU64},      {"function_state", kBytes}, {"float_product", kF64},
      {"int_product", kI64},  {"uint_product", kU64},  {"nonzero", kU64},       {"float_max", kF64},
      {"int_max", kI64},      {"uint_max", kU64},      {"exact_sum", kBytes},   {"exact_sum_squares", kBytes}};
  const std::string_view all = py::cast<std::string_view>(serialized);
  std::uint64_t version = 0, dtype = 0;
  std::vector<std::string_view> states;
  for (WireReader r(all); !r.done();) {
    const std::uint64_t tag = r.Varint();
    const auto number = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    if (number == 1 && wire_type == 0) {
      version = r.Varint();
    } else if (number == 2 && wire_type == 0) {
      dtype = r.Varint();
    } else if (number == 3 && wire_type == 2) {
      states.push_back(r.Bytes());
    } else {
      r.Skip(wire_type);
    }
  }
  const std::size_t n = states.size();
  std::vector<std::vector<std::uint64_t>> words(24, std::vector<std::uint64_t>(n, 0));  // u64, i64 and f64 bits
  std::vector<std::vector<std::string_view>> blobs(24);
  for (int f = 1; f < 24; ++f) {
    if (kFields[f].name != nullptr && kFields[f].kind == kBytes) blobs[f].assign(n, std::string_view());
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (WireReader r(states[i]); !r.done();) {
      const std::uint64_t tag = r.Varint();
      const auto number = tag >> 3;
      const int wire_type = static_cast<int>(tag & 7);
      if (number == 12) return py::none();  // a histogram
      if (number >= 24 || kFields[number].name == nullptr) {
        r.Skip(wire_type);
        continue;
      }
      const Field& f = kFields[number];
      const int expected = f.kind == kF64 ? 1 : f.kind == kBytes ? 2 : 0;
      if (wire_type != expected) {
        throw py::value_error(std::string("partial states: ") + f.name + " has wire type " + std::to_string(wire_type));
      }
      if (f.kind == kF64) {
        const double v = r.Fixed64();
        std::memcpy(&words[number][i], &v, 8);
      } else if (f.kind == kBytes) {
        blobs[number][i] = r.Bytes();
      } else {
        words[number][i] = r.Varint();  // int64 fields are two's complement varints
      }
    }
  }
  py::dict out;
  out["version"] = version;
  out["dtype"] = dtype;
  for (int f = 1; f < 24; ++f) {
    if (kFields[f].name == nullptr) continue;
    if (kFields[f].kind == kBytes) {
      py::list list(n);
      for (std::size_t i = 0; i < n; ++i) list[i] = py::bytes(blobs[f][i].data(), blobs[f][i].size());
      out[kFields[f].name] = list;
      continue;
    }
    const auto fill = [&](auto t) {
      using T = decltype(t);
      py::array_t<T> a(static_cast<py::ssize_t>(n));
      if (n != 0) std::memcpy(a.mutable_data(), words[f].data(), n * sizeof(T));
      out[kFields[f].name] = a;
    };
    if (kFields[f].kind == kF64) {
      fill(double{});
    } else if (kFields[f].kind == kI64) {
      fill(std::int64_t{});
    } else {
      fill(std::uint64_t{});
    }
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_states, m) {
  m.doc() = "Partial states merged and finished by tally's rules: the quantile, topk and sketch functions' "
            "(merge, finish), and the other ops' for tests of tally.partial (merge_state, finish_state).";
  m.def("merge", &Merge, py::arg("spec"), py::arg("dtype"), py::arg("a"), py::arg("b"),
        "The state of a's elements followed by b's. spec: (op, q, method, k, precision, relative_accuracy) "
        "as tally.v1.Aggregation numbers them; dtype: a tally.v1.DType number; a, b: function_state bytes "
        "(empty: the empty state).");
  m.def("finish", &Finish, py::arg("spec"), py::arg("dtype"), py::arg("count"), py::arg("elements"),
        py::arg("state"),
        "One row's answer from its state and its count and elements (PartialState's): (doubles, int64s, "
        "uint64s, indices) as the server sends them.");
  m.def("merge_state", &MergeState, py::arg("op"), py::arg("ddof"), py::arg("dtype"), py::arg("a"), py::arg("b"),
        "rules::Merge of two states of an op whose state is PartialState's scalar fields (sum ... ptp, not "
        "histogram). op: a tally.v1.Op number; dtype: a tally.v1.DType number; a, b: dicts of "
        "tally.v1.PartialState's scalar fields by name (one left out is 0, index -1). Returns every field.");
  m.def("finish_state", &FinishState, py::arg("op"), py::arg("ddof"), py::arg("dtype"), py::arg("state"),
        "The value the C++ client finishes such a state into: (\"doubles\" | \"int64s\" | \"uint64s\", value), "
        "or None where it has none (rules::HasValue).");
  m.def("merge_exact_sums", &MergeExactSums, py::arg("a"), py::arg("a_values"), py::arg("b"), py::arg("b_values"),
        "Rows' exact sums merged by the rules: a's exact_sum bytes (or its value where they are empty) "
        "followed by b's, each row keeping bytes on one side at least. Returns (list of merged bytes, float64 "
        "array of their values).");
  m.def("merge_exact_moments", &MergeExactMoments, py::arg("a_sum"), py::arg("a_squares"), py::arg("b_sum"),
        py::arg("b_squares"), py::arg("counts"),
        "Rows' variance states merged where both keep exact sums and sums of squares. Returns (merged sums' "
        "bytes, merged squares' bytes, mean array, m2 array).");
  m.def("partial_columns", &PartialColumns, py::arg("serialized"),
        "A serialized tally.v1.PartialStates as columns: a dict of numpy arrays of PartialState's number fields "
        "and lists of its byte fields, one entry a state, with 'version' and 'dtype'; None where a state holds "
        "a histogram.");
  m.def("scalar_state_ops", &ScalarStateOps,
        "The canonical names of the ops whose partial states merge_state and finish_state take.");
}
