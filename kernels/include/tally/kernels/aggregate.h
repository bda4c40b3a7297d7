// tally's GPU aggregation API: every op of the v1 wire contract, any subset
// fused into one pass over the data, on whole arrays or on batches of equal
// rows, fed chunk by chunk. Plain C++ (no nvcc needed to include it).
//
// Usage (the engine):
//
//   kernels::AggregatePlan plan;
//   plan.dtype = rules::DType::kFloat32;
//   plan.ops = rules::Bit(rules::OpKind::kSum) | rules::Bit(rules::OpKind::kArgmax);
//   plan.length = total_elements;        // whole array
//   plan.row_length = 0;                 // or N for rows of N elements
//   if (kernels::Validate(plan) != cudaSuccess) ...   // INVALID_ARGUMENT
//   const kernels::ResultLayout layout = kernels::LayoutOf(plan);
//   size_t scratch = 0;
//   (void)kernels::ScratchBytes(plan, max_chunk_elements, &scratch);
//   // caller-owned: d_state (layout.bytes, device), d_scratch (scratch,
//   // device), h_result (layout.bytes, pinned host)
//   for (each chunk, in order)   // chunk = whole elements, device-resident
//     kernels::Accumulate(plan, d_chunk, chunk_elements, chunk_offset,
//                         d_state, d_scratch, scratch, stream);
//   kernels::Finalize(plan, d_state, h_result, stream);
//   cudaStreamSynchronize(stream);
//   kernels::ResultView r(plan, h_result);
//   double s = r.Sum(0).f64;  int64_t i = r.Argmax(0);  double v = r.Variance(0, 1.0);
//
// A whole array already on the device is one chunk: Aggregate() does
// Accumulate(offset 0) + Finalize, the fast path.
//
// Rules:
// - Chunks arrive in order with their global element offset; a row may span
//   chunks. The chunk at offset 0 starts the state (no separate init), so an
//   empty whole array still needs one Accumulate(n = 0, offset = 0).
// - Same input and same chunk cuts on the same device: bitwise the same
//   results (no floating-point atomics; fixed combine order).
// - Nothing here allocates; scratch may be reused by the next call on the
//   same stream. Calls are asynchronous on `stream`.
// - Errors come back as cudaError_t (cudaErrorInvalidValue for a bad plan or
//   argument); tally::cuda::LastErrorWhere() says where a CUDA call failed.
// - A validity mask (plan.validity) makes every op skip the elements whose
//   bit is 0, as if it ran on x[valid]; the NaN-skipping ops (float dtypes)
//   skip NaNs too, as numpy's nan-functions do. Both run in the same single
//   pass, beside any plain ops; plans with neither run the kernels they ran
//   before (a mask costs nothing when there is none).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tally/rules/exact_moments.h"
#include "tally/rules/exact_sum.h"
#include "tally/rules/combine.h"
#include "tally/rules/dtype.h"
#include "tally/rules/op.h"

namespace tally::kernels {

struct AggregatePlan {
  rules::DType dtype = rules::DType::kFloat32;
  // Any set of ops; kCount needs no pass (ResultView::Count derives it),
  // kMean/kVariance/kStddev share one Moments state. kProduct and
  // kCountNonzero (kFoldOps) take a pass of their own each over the same
  // chunk, the fold pass (numpy.prod, numpy.count_nonzero; any, all are
  // read from the nonzero count and ptp from min and max by the caller).
  rules::OpMask ops = 0;
  // At most one histogram per pass (read when ops has kHistogram).
  rules::HistogramSpec histogram{};
  // Total elements of the array (all chunks together).
  std::uint64_t length = 0;
  // 0: the whole array is one row. N > 0: rows of N elements; N divides length.
  std::uint64_t row_length = 0;
  // Arrow's validity bitmap of the whole array, on the device, or nullptr
  // (every element valid). Bit i (bit i % 32 of the little-endian 32-bit
  // word i / 32, i.e. bit i % 8 of byte i / 8: tally/rules/validity.h) is
  // element i, counted over all chunks from the array's start; 1 = valid.
  // 4-byte aligned and readable up to ceil(length / 32) words; the bits
  // past `length` are ignored. With a mask the result stores each row's
  // valid elements (ResultLayout::count), an all-masked row is empty (sum 0,
  // moments count 0, min/max the identities below, argmin/argmax -1), and
  // argmin/argmax indices still count every element from the row start.
  const std::uint32_t* validity = nullptr;
  // Float sums, and every dtype's means, sums of squares, variances and
  // standard deviations (and their NaN-skipping forms), by the exact pass
  // (ExactOps): the same bits on every path.
  bool exact_sums = false;
};

// cudaSuccess, or cudaErrorInvalidValue when the plan breaks the v1 limits.
[[nodiscard]] cudaError_t Validate(const AggregatePlan& plan);

// The NaN-skipping ops (kNanSum ... kNanCount) a plan may ask for: float
// dtypes only (on integers and bool they are the plain ops, as in numpy, and
// Validate refuses their bits there).
inline constexpr rules::OpMask kNanOps =
    (rules::Bit(rules::OpKind::kNanCount) << 1) - rules::Bit(rules::OpKind::kNanSum);

// The ops the fold pass computes, beside the fused ones.
inline constexpr rules::OpMask kFoldOps = rules::Bit(rules::OpKind::kProduct) | rules::Bit(rules::OpKind::kCountNonzero);

// Rows reported: 1 for a whole array, length / row_length when segmented.
std::uint64_t RowsOf(const AggregatePlan& plan);

// One 8-byte result slot; which member holds the value depends on the dtype:
// f64 for float32/float64, i64 for int32/int64, u64 for uint32/uint8.
union Scalar {
  double f64;
  std::int64_t i64;
  std::uint64_t u64;
};

// The layout of both the device state and the host result (the same bytes):
// structure of arrays, one array per stored field, each `rows` long, at the
// byte offsets below (kAbsent when the plan does not need the field).
//   sum          Scalar[rows]
//   min, max     Scalar[rows]       (the extreme in Scalar's dtype member)
//   moments      rules::Moments[rows] (count, mean, M2 as float64)
//   sum_squares  double[rows]
//   argmin/argmax               int64[rows], index from the row start
//   argmin_value/argmax_value   Scalar[rows], the element at that index
//   histograms   uint64[rows][histogram_stride]: counts[bins], below, above, nan
//   count        uint64[rows], the valid elements (plans with a validity mask)
// The NaN-skipping ops' fields, over the (valid) elements that are not NaN:
//   nan_count    uint64[rows], for every NaN-skipping op (numpy.nancount;
//                0 says the row had none: nanmin/nanmax/nanargmin/
//                nanargmax then have no value, nanmean/nanvar NaN)
//   nan_sum      double[rows] (numpy.nansum: 0 when there are none)
//   nan_min, nan_max              Scalar[rows] (f64); +inf / -inf when none
//   nan_moments  rules::Moments[rows] (nanmean, nanvar, nanstd)
//   nan_argmin/nan_argmax         int64[rows], the first occurrence of the
//                                 non-NaN extreme from the row start; -1 when none
//   nan_argmin_value/nan_argmax_value   Scalar[rows] (f64), the element there
// The fold pass's fields (kFoldOps), over the (valid) elements:
//   product      Scalar[rows], numpy.prod in float64 (float dtypes), int64
//                (signed) or uint64 (unsigned, bool), integers wrapping
//                modulo 2^64; 1 for an empty row
//   nonzero      uint64[rows], the elements that are not zero (NaN is one)
// The extremes' identities, which an empty row holds: +inf / -inf for float
// dtypes, the dtype's max / lowest for integers (in Scalar's member).
// Absent ops leave their arrays out; nothing is stored for kCount without a
// mask.
struct ResultLayout {
  static constexpr std::size_t kAbsent = ~std::size_t{0};
  std::uint64_t rows = 0;
  std::size_t sum = kAbsent, min = kAbsent, max = kAbsent, moments = kAbsent,
              sum_squares = kAbsent, argmin = kAbsent, argmin_value = kAbsent, argmax = kAbsent,
              argmax_value = kAbsent, histograms = kAbsent;
  std::size_t count = kAbsent;
  std::size_t nan_count = kAbsent, nan_sum = kAbsent, nan_min = kAbsent, nan_max = kAbsent,
              nan_moments = kAbsent, nan_argmin = kAbsent, nan_argmin_value = kAbsent,
              nan_argmax = kAbsent, nan_argmax_value = kAbsent;
  std::size_t product = kAbsent, nonzero = kAbsent;
  // Exact plans (ExactOps): the elements added exactly, and their squares
  // where asked (ResultView::ExactState), kExactStateWords a row each;
  // the exact ops' own fields are then not written. The elements' state
  // counts NaNs (not added), +inf, -inf, whether a non-NaN element other
  // than -0.0 was seen, and the valid elements (masked plans); the
  // squares' counts its +inf.
  static constexpr int kExactNan = rules::ExactSum::kDigits, kExactPositiveInf = kExactNan + 1,
                       kExactNegativeInf = kExactNan + 2, kExactOther = kExactNan + 3,
                       kExactSeen = kExactNan + 4, kExactStateWords = kExactNan + 5;
  std::size_t exact_sum = kAbsent, exact_squares = kAbsent;
  std::uint32_t histogram_stride = 0;  // bins + 3
  std::size_t bytes = 0;               // state bytes = result bytes
};

ResultLayout LayoutOf(const AggregatePlan& plan);

// The plan's ops that the exact pass answers (a read of its own; the fused
// pass takes the rest): with plan.exact_sums, a float dtype's sums, and
// every dtype's means, sums of squares, variances and standard deviations,
// NaN-skipping or not, whole or per row (an integer sum is the native one,
// modulo 2^64). 0 otherwise.
rules::OpMask ExactOps(const AggregatePlan& plan);

// Device scratch one Accumulate of up to `max_chunk_elements` needs on the
// current device (it may be 0; pass any pointer then).
[[nodiscard]] cudaError_t ScratchBytes(const AggregatePlan& plan, std::uint64_t max_chunk_elements,
                                       std::size_t* bytes);

// Folds elements [offset, offset + elements) of the array, at d_chunk on the
// device, into d_state (LayoutOf(plan).bytes, device memory).
[[nodiscard]] cudaError_t Accumulate(const AggregatePlan& plan, const void* d_chunk,
                                     std::uint64_t elements, std::uint64_t offset, void* d_state,
                                     void* d_scratch, std::size_t scratch_bytes,
                                     cudaStream_t stream);

// Copies the state into h_result (LayoutOf(plan).bytes; pinned for a truly
// asynchronous copy). Read it after the stream has synchronized.
[[nodiscard]] cudaError_t Finalize(const AggregatePlan& plan, const void* d_state, void* h_result,
                                   cudaStream_t stream);

// The whole array in one call: Accumulate(d_data, plan.length, 0) + Finalize.
// For a small array (one block's worth, no histogram) and a pinned h_result
// the kernel writes the results straight into h_result (no copy; d_state is
// not touched): the latency path.
[[nodiscard]] cudaError_t Aggregate(const AggregatePlan& plan, const void* d_data, void* d_state,
                                    void* d_scratch, std::size_t scratch_bytes, void* h_result,
                                    cudaStream_t stream);

// Reads a finished result (host bytes in the layout above) and derives the
// ops that are functions of the stored state, as numpy defines them.
class ResultView {
 public:
  ResultView(const AggregatePlan& plan, const void* result)
      : plan_(plan), layout_(LayoutOf(plan)), base_(static_cast<const unsigned char*>(result)) {}

  const ResultLayout& layout() const { return layout_; }
  std::uint64_t Rows() const { return layout_.rows; }
  // The row's elements; with a validity mask, its valid elements (stored).
  std::uint64_t Count(std::uint64_t row) const {
    if (layout_.count != ResultLayout::kAbsent) return At<std::uint64_t>(layout_.count, row);
    if (plan_.validity != nullptr && layout_.exact_sum != ResultLayout::kAbsent) {
      return Word(row, ResultLayout::kExactSeen);  // counted by the exact pass
    }
    return plan_.row_length == 0 ? plan_.length : plan_.row_length;
  }
  // Float dtypes (ExactOps): the exact sum rounded once to float64.
  Scalar Sum(std::uint64_t r) const {
    if (layout_.exact_sum != ResultLayout::kAbsent && rules::IsFloat(plan_.dtype)) {
      return Scalar{.f64 = ExactState(false, r).ToDouble()};
    }
    return At<Scalar>(layout_.sum, r);
  }
  Scalar Min(std::uint64_t r) const { return At<Scalar>(layout_.min, r); }
  Scalar Max(std::uint64_t r) const { return At<Scalar>(layout_.max, r); }
  // Exact plans: the count, the exact sum rounded once over it, and M2 from
  // the exact sums (rules::PutExactMoments; 0 where no squares were kept).
  rules::Moments Moments(std::uint64_t r) const {
    if (layout_.exact_sum != ResultLayout::kAbsent) return ExactMoments(false, r);
    return At<rules::Moments>(layout_.moments, r);
  }
  double Mean(std::uint64_t r) const { return rules::MeanOf(Moments(r)); }
  double Variance(std::uint64_t r, double ddof) const { return rules::VarianceOf(Moments(r), ddof); }
  double Stddev(std::uint64_t r, double ddof) const { return rules::StddevOf(Moments(r), ddof); }
  double SumSquares(std::uint64_t r) const {
    if (layout_.exact_squares != ResultLayout::kAbsent) return ExactSquaresState(false, r).ToDouble();
    return At<double>(layout_.sum_squares, r);
  }
  std::int64_t Argmin(std::uint64_t r) const { return At<std::int64_t>(layout_.argmin, r); }
  std::int64_t Argmax(std::uint64_t r) const { return At<std::int64_t>(layout_.argmax, r); }
  // The element at Argmin(r) / Argmax(r), in Scalar's dtype member.
  Scalar ArgminValue(std::uint64_t r) const { return At<Scalar>(layout_.argmin_value, r); }
  Scalar ArgmaxValue(std::uint64_t r) const { return At<Scalar>(layout_.argmax_value, r); }
  // counts[0..bins), then below, above, nan.
  const std::uint64_t* Histogram(std::uint64_t r) const {
    return reinterpret_cast<const std::uint64_t*>(base_ + layout_.histograms) +
           r * layout_.histogram_stride;
  }
  std::uint64_t HistogramBelow(std::uint64_t r) const { return Histogram(r)[layout_.histogram_stride - 3]; }
  std::uint64_t HistogramAbove(std::uint64_t r) const { return Histogram(r)[layout_.histogram_stride - 2]; }
  std::uint64_t HistogramNan(std::uint64_t r) const { return Histogram(r)[layout_.histogram_stride - 1]; }

  // The NaN-skipping ops, over the row's (valid) elements that are not NaN.
  // NanCount(r) == 0: none; then NanSum is 0, NanMin/NanMax hold +inf/-inf
  // (no value: numpy warns and answers NaN), NanMean and NanVariance are
  // NaN, NanArgmin/NanArgmax are -1 (numpy raises).
  std::uint64_t NanCount(std::uint64_t r) const {
    // No fused pass counted them: the exact pass's NaN count tells.
    if (layout_.nan_count == ResultLayout::kAbsent && layout_.exact_sum != ResultLayout::kAbsent) {
      return Count(r) - Word(r, ResultLayout::kExactNan);
    }
    return At<std::uint64_t>(layout_.nan_count, r);
  }
  double NanSum(std::uint64_t r) const {
    if (layout_.exact_sum != ResultLayout::kAbsent) return ExactState(true, r).ToDouble();
    return At<double>(layout_.nan_sum, r);
  }
  Scalar NanMin(std::uint64_t r) const { return At<Scalar>(layout_.nan_min, r); }
  Scalar NanMax(std::uint64_t r) const { return At<Scalar>(layout_.nan_max, r); }
  rules::Moments NanMoments(std::uint64_t r) const {
    if (layout_.exact_sum != ResultLayout::kAbsent) return ExactMoments(true, r);
    return At<rules::Moments>(layout_.nan_moments, r);
  }
  double NanMean(std::uint64_t r) const { return rules::MeanOf(NanMoments(r)); }
  // numpy.nanvar / nanstd: NaN where count - ddof <= 0.
  double NanVariance(std::uint64_t r, double ddof) const { return rules::NanVarianceOf(NanMoments(r), ddof); }
  double NanStddev(std::uint64_t r, double ddof) const { return rules::NanStddevOf(NanMoments(r), ddof); }
  std::int64_t NanArgmin(std::uint64_t r) const { return At<std::int64_t>(layout_.nan_argmin, r); }
  std::int64_t NanArgmax(std::uint64_t r) const { return At<std::int64_t>(layout_.nan_argmax, r); }
  Scalar NanArgminValue(std::uint64_t r) const { return At<Scalar>(layout_.nan_argmin_value, r); }
  Scalar NanArgmaxValue(std::uint64_t r) const { return At<Scalar>(layout_.nan_argmax_value, r); }

  // The fold pass's: numpy.prod (Scalar's member for the dtype) and the
  // nonzero count.
  Scalar Product(std::uint64_t r) const { return At<Scalar>(layout_.product, r); }
  std::uint64_t Nonzero(std::uint64_t r) const { return At<std::uint64_t>(layout_.nonzero, r); }

  // The exact pass's states of row r as the rules' (the same bytes the cpu
  // backend's elements give): the elements' sum over every element (`nan`:
  // those not NaN), and the sum of their squares likewise. Only where the
  // layout keeps them (exact_sum, exact_squares).
  rules::ExactSum ExactState(bool nan, std::uint64_t r) const {
    const std::int64_t* e = Words(layout_.exact_sum, r);
    const auto nans = static_cast<std::uint64_t>(e[ResultLayout::kExactNan]);
    const auto pinf = static_cast<std::uint64_t>(e[ResultLayout::kExactPositiveInf]);
    const auto ninf = static_cast<std::uint64_t>(e[ResultLayout::kExactNegativeInf]);
    const std::uint64_t summed = Count(r) - nans;  // the elements not NaN
    rules::ExactSum sum;
    sum.AddDigits(e, summed - pinf - ninf, e[ResultLayout::kExactOther] != 0);
    sum.NoteSpecials(nan ? 0 : nans, pinf, ninf);
    return sum;
  }
  rules::ExactSum ExactSquaresState(bool nan, std::uint64_t r) const {
    const std::int64_t* q = Words(layout_.exact_squares, r);
    const auto nans = Word(r, ResultLayout::kExactNan);
    const auto inf = static_cast<std::uint64_t>(q[ResultLayout::kExactPositiveInf]);
    const std::uint64_t summed = Count(r) - nans;
    rules::ExactSum squares;
    squares.AddDigits(q, summed - inf, summed != 0);  // a square is never -0.0
    squares.NoteSpecials(nan ? 0 : nans, inf, 0);
    return squares;
  }
  bool HasExactSquares() const { return layout_.exact_squares != ResultLayout::kAbsent; }
  // Whether the exact pass answers `kind` (ExactOps).
  bool IsExact(rules::OpKind kind) const { return rules::Has(ExactOps(plan_), kind); }

 private:
  rules::Moments ExactMoments(bool nan, std::uint64_t r) const {
    const std::uint64_t n = nan ? NanCount(r) : Count(r);
    rules::Moments m{static_cast<double>(n), 0.0, 0.0};
    if (n == 0) return m;
    const rules::ExactSum sum = ExactState(nan, r);
    m.mean = sum.ToDouble() / static_cast<double>(n);
    if (HasExactSquares()) m.m2 = rules::ExactSecondMoment(sum, ExactSquaresState(nan, r), n);
    return m;
  }
  // Row r's exact state at `at` (exact_sum or exact_squares), and a word of
  // its elements' state.
  const std::int64_t* Words(std::size_t at, std::uint64_t r) const {
    return reinterpret_cast<const std::int64_t*>(base_ + at) + r * ResultLayout::kExactStateWords;
  }
  std::uint64_t Word(std::uint64_t r, int k) const { return static_cast<std::uint64_t>(Words(layout_.exact_sum, r)[k]); }

  template <typename V>
  V At(std::size_t offset, std::uint64_t r) const {
    return reinterpret_cast<const V*>(base_ + offset)[r];
  }
  AggregatePlan plan_;
  ResultLayout layout_;
  const unsigned char* base_;
};

}  // namespace tally::kernels
