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
#include <iterator>
#include <limits>
#include <optional>
#include <string>
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
  m.def("scalar_state_ops", &ScalarStateOps,
        "The canonical names of the ops whose partial states merge_state and finish_state take.");
}
