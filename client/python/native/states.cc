// tally._states: a function's partial states (tally.proto,
// PartialState.function_state) merged and finished by tally/rules, the
// steps the server and the C++ client run, for the Python package.
// An aggregation arrives as its tally.v1.Aggregation fields (op number, q,
// method, k, precision, relative_accuracy) and a dtype as its tally.v1
// number; errors are ValueError with the rules' sentence.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
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

}  // namespace

PYBIND11_MODULE(_states, m) {
  m.doc() = "Partial states of tally's quantile, topk and sketch functions, merged and finished by tally's rules.";
  m.def("merge", &Merge, py::arg("spec"), py::arg("dtype"), py::arg("a"), py::arg("b"),
        "The state of a's elements followed by b's. spec: (op, q, method, k, precision, relative_accuracy) "
        "as tally.v1.Aggregation numbers them; dtype: a tally.v1.DType number; a, b: function_state bytes "
        "(empty: the empty state).");
  m.def("finish", &Finish, py::arg("spec"), py::arg("dtype"), py::arg("count"), py::arg("elements"),
        py::arg("state"),
        "One row's answer from its state and its count and elements (PartialState's): (doubles, int64s, "
        "uint64s, indices) as the server sends them.");
}
