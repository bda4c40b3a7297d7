// The CPU backend's Reduction. The array is cut at fixed row-relative
// positions into blocks (CpuPolicy::kBlockElements) and chunks
// (kChunkBlocks blocks). A block is reduced by one fixed algorithm
// (block_kernels.h) into a Partial (block_partial.h); a chunk folds its blocks' partials in
// block order; a row folds its chunks' partials in chunk order. How Consume()
// pieces the array and how many threads share the work therefore cannot
// change a single bit of the results. Histogram counts are integers, so they
// may be added up in any order. A row's fold becomes one rules::PartialState
// per op, finished (or answered as it is) by server/engine/finish.h.
// NaN-skipping ops (float dtypes) fold fields of their own, taken from the
// same blocks by a second loop over each while it is in L1; on integer
// dtypes they are their plain ops (rules::PlainOf), as in numpy. prod and
// count_nonzero (which any and all are read from) fold fields of their own
// too, from a further loop over each block; ptp is the row's max - min.
#include "server/engine/cpu/reduction.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/engine/cpu/block_kernels.h"
#include "server/engine/cpu/block_partial.h"
#include "server/engine/cpu/exact_integers.h"
#include "server/engine/cpu/masked_block.h"
#include "server/engine/cpu/tuning.h"
#include "server/engine/host_runs.h"
#include "server/engine/huge_pages.h"
#include "server/engine/finish.h"
#include "tally/rules/combine.h"
#include "tally/rules/dtype.h"
#include "tally/rules/histogram_bin.h"
#include "tally/rules/op.h"
#include "tally/rules/partial.h"

namespace tally::cpu {
namespace {

constexpr std::uint64_t kBlock = CpuPolicy::kBlockElements;
constexpr std::uint64_t kChunk = CpuPolicy::kChunkElements;

// Elements of the piece that are not aligned for V are copied to `bounce`
// first (allocated on first need). Not thread_local: static TLS is reserved in
// every thread of the process, the small stacks of other libraries' threads
// (e.g. the metrics HTTP server's) included.
template <typename V>
const V* AlignedBlock(const std::byte* p, std::size_t n, std::unique_ptr<V[]>& bounce) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(V) == 0) return reinterpret_cast<const V*>(p);
  if (!bounce) bounce = std::make_unique_for_overwrite<V[]>(kBlock);
  std::memcpy(bounce.get(), p, n * sizeof(V));
  return bounce.get();
}

// Block [byte, byte + n elements) of `runs`: where it lies when one run
// holds it (aligned), else gathered into `bounce`.
template <typename V>
const V* BlockAt(const HostRuns& runs, std::uint64_t byte, std::size_t n, std::unique_ptr<V[]>& bounce) {
  if (const std::byte* p = runs.Find(byte, n * sizeof(V))) return AlignedBlock<V>(p, n, bounce);
  if (!bounce) bounce = std::make_unique_for_overwrite<V[]>(kBlock);
  runs.CopyOut(byte, n * sizeof(V), reinterpret_cast<std::byte*>(bounce.get()));
  return bounce.get();
}

// Where a histogram op's per-row counts are binned: its results, or the
// histograms of its partial states.
struct HistogramOut {
  HistogramResult* h = nullptr;
  rules::PartialState* p = nullptr;
  HistogramResult& Row(std::uint64_t row) const { return p ? p[row].histogram : h[row]; }
};

template <DType kD>
class CpuReduction final : public Reduction {
  using V = typename rules::Traits<kD>::value;
  using Binner = rules::BinnerFor<rules::Traits<kD>>;

 public:
  CpuReduction(const AggregationPlan& plan, ThreadPool* pool, std::string device)
      : plan_(plan),
        ops_(EffectiveOps(plan.ops, kD)),
        pool_(pool),
        device_(std::move(device)),
        needs_(NeedsOf(ops_, kD)) {
    rows_ = plan_.array.rows();

    unsigned mask = 0;
    // Float sums, means, sums of squares and moments come exact from their
    // own passes (exact_block.h), so float dtypes take no lane sums; an
    // integer one's exact sum starts from its native lane sum where that is
    // exact (IntegerBlockSums).
    const bool lane_sum = !rules::kIsFloatValue<V> &&
                          (needs_.native_sum || (needs_.exact_sum && !needs_.exact_squares && !kWideInteger));
    if (lane_sum) mask |= kLaneSum;
    // float32's and float64's exact range pass takes min and max too
    // (RangeOfBlock), so a block with both is read once.
    if constexpr (std::is_same_v<V, float> || std::is_same_v<V, double>) {
      extremes_in_range_ = (needs_.exact_sum || needs_.exact_squares) && (needs_.min || needs_.max);
    }
    if (needs_.min && !extremes_in_range_) mask |= kLaneMin;
    if (needs_.max && !extremes_in_range_) mask |= kLaneMax;
    static constexpr auto kTable = FusedTable<V>(std::make_index_sequence<kLaneMasks>{});
    fused_ = kTable[mask];
    if constexpr (rules::kIsFloatValue<V>) {
      unsigned nan_mask = 0;
      if (needs_.nan_sum) nan_mask |= kNanLaneSum;
      if (needs_.nan_min) nan_mask |= kNanLaneMin;
      if (needs_.nan_max) nan_mask |= kNanLaneMax;
      static constexpr auto kNan = NanTable<V>(std::make_index_sequence<kNanLaneMasks>{});
      if (needs_.any_nan()) nan_fused_ = kNan[nan_mask];
    }
    unsigned more_mask = 0;
    if (needs_.product) more_mask |= kMoreLaneProduct;
    if (needs_.nonzero) more_mask |= kMoreLaneNonzero;
    static constexpr auto kMore = MoreTable<V>(std::make_index_sequence<kMoreLaneMasks>{});
    if (more_mask != 0) more_fused_ = kMore[more_mask];

    // The results start with no rows: GrowRows() builds them as they arrive.
    values_.reserve(ops_.size());
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      const OpSpec& op = ops_[k];
      values_.push_back(EmptyValues(op, kD, 0));
      if (op.kind == OpKind::kHistogram) {
        binners_.push_back(Binner::Make(op.histogram.bins, op.histogram.lo,
                                                            op.histogram.hi));
        hist_ops_.push_back(static_cast<int>(k));
      }
    }
    hist_outs_.resize(binners_.size());
    buffer_.resize(kBlock);
    if (plan_.array.masked()) mask_.emplace(plan_.array.validity->data(), plan_.array.length);
    EnterRow();
  }

  absl::Status Consume(const Extent& piece) override {
    absl::StatusOr<std::uint64_t> next = CheckNext(piece.placement, piece.size());
    if (!next.ok()) return next.status();
    std::uint64_t n = *next;
    consumed_ += n;
    const std::byte* p = piece.bytes.data();
    while (n > 0) {
      const std::uint64_t taken = Step(p, n);
      p += taken * sizeof(V);
      n -= taken;
    }
    return absl::OkStatus();
  }

  // Runs present at once (a unary message's slices): whole chunks and whole
  // short rows are reduced in parallel, read where they lie or gathered a
  // block at a time; the rest goes through Consume() in order. The cuts are
  // the same as Consume()'s, so are the bits.
  absl::Status ConsumeRuns(const HostRuns& runs) override {
    absl::StatusOr<std::uint64_t> next = CheckNext(runs.placement(), runs.size());
    if (!next.ok()) return next.status();
    const std::uint64_t n = *next;
    std::uint64_t at = 0;
    while (at < n) {
      const std::uint64_t left = n - at;
      const std::uint64_t row_left = row_len_ - pos_;
      const std::uint64_t whole_rows = short_rows_ && pos_ == 0 ? ShortRowsIn(left) : 0;
      std::uint64_t take = 0;
      if (whole_rows > 0) {
        take = ElementsOfRows(whole_rows);
        consumed_ += take;
        ParallelRows(runs, at * sizeof(V), whole_rows);
      } else if (!short_rows_ && pos_ % kChunk == 0 && (left >= kChunk || left >= row_left)) {
        take = std::min(left, row_left);
        if (take < row_left) take -= take % kChunk;
        take = std::min<std::uint64_t>(take, CpuPolicy::kMaxChunksPerDispatch * kChunk);
        consumed_ += take;
        ParallelChunks(runs, at * sizeof(V), take);
      } else {
        // Up to the next chunk boundary or the row's end, in order.
        take = std::min(left, short_rows_ ? row_left : std::min(row_left, kChunk - pos_ % kChunk));
        if (absl::Status s = ConsumeInOrder(runs, at * sizeof(V), take * sizeof(V)); !s.ok()) return s;
      }
      at += take;
    }
    return absl::OkStatus();
  }

  std::size_t element_size() const override { return sizeof(V); }

  absl::StatusOr<AggregationResult> Finish() override {
    if (consumed_ != plan_.array.length) {
      return absl::InvalidArgumentError(absl::StrCat("data: received ", consumed_, " of the ",
                                                     plan_.array.length, " elements in spec.length."));
    }
    GrowRows(rows_);  // every row has arrived; an empty array has its one row still to build
    if (!plan_.array.segmented() && plan_.array.length == 0) {
      for (const OpSpec& op : plan_.ops) {
        if (rules::NeedsNonEmpty(op)) {
          return absl::InvalidArgumentError(
              absl::StrCat(rules::Name(op.kind), " of an empty array has no value."));
        }
      }
      FinishRow(0, Partial<V>{});  // sums 0, mean NaN; empty partial states
    }
    if (const std::uint64_t row = no_valid_row_.load(); row != kNoRow) {
      const auto first = std::find_if(plan_.ops.begin(), plan_.ops.end(),
                                      [](const OpSpec& o) { return rules::NeedsNonEmpty(o); });
      return NoValidElements(plan_.NameOf(static_cast<std::size_t>(first - plan_.ops.begin())), plan_.array, row);
    }
    if (const std::uint64_t row = all_nan_row_.load(); row != kNoRow) {
      // numpy raises for the whole call when any row is all NaN.
      return AllNan(rules::Name(FirstNeedingNonNan().kind), plan_.array, row);
    }
    AggregationResult result;
    result.values = std::move(values_);
    result.backend = "cpu";
    result.device = device_;
    return result;
  }

 private:
  // Takes some of the n elements at p (at least one) and returns how many.
  std::uint64_t Step(const std::byte* p, std::uint64_t n) {
    const std::uint64_t in_block = pos_ % kBlock;
    if (in_block != 0) {  // complete the buffered block
      const std::uint64_t start = pos_ - in_block;
      const std::uint64_t len = std::min(kBlock, row_len_ - start);
      const std::uint64_t take = std::min(n, len - in_block);
      std::memcpy(buffer_.data() + in_block, p, take * sizeof(V));
      pos_ += take;
      if (pos_ == start + len) SequentialBlock(buffer_.data(), len, start);
      return take;
    }
    if (const std::uint64_t rows = short_rows_ && pos_ == 0 ? ShortRowsIn(n) : 0; rows > 0) {
      const std::uint64_t elements = ElementsOfRows(rows);
      ParallelRows(OneRun(p, elements), 0, rows);
      return elements;
    }
    const std::uint64_t row_left = row_len_ - pos_;
    if (!short_rows_ && pos_ % kChunk == 0 && (n >= kChunk || n >= row_left)) {
      std::uint64_t elements = std::min(n, row_left);
      if (elements < row_left) elements -= elements % kChunk;  // whole chunks only
      elements = std::min<std::uint64_t>(elements, CpuPolicy::kMaxChunksPerDispatch * kChunk);
      ParallelChunks(OneRun(p, elements), 0, elements);
      return elements;
    }
    const std::uint64_t len = std::min(kBlock, row_left);
    if (n >= len) {
      SequentialBlock(AlignedBlock<V>(p, len, bounce_), len, pos_);
      return len;
    }
    std::memcpy(buffer_.data(), p, n * sizeof(V));
    pos_ += n;
    return n;
  }

  // Reduces one block at row position `offset`, element `first` of the
  // array, into a Partial, binning it into `sinks` (one per histogram op).
  // Under a mask only its valid elements, gathered into `gathered`.
  Partial<V> ReduceBlock(const V* x, std::size_t n, std::uint64_t offset, std::uint64_t first,
                         const HistogramSink* sinks, Gathered<V>& gathered) const {
    if (mask_) {
      const std::size_t valid = mask_->Count(first, n);
      if (valid == 0) return Partial<V>{};
      if (valid < n) {
        gathered.From(x, n, *mask_, first);
        return ReduceDense(gathered.values.get(), valid, offset, gathered.positions.get(), sinks);
      }
    }
    return ReduceDense(x, n, offset, nullptr, sinks);
  }

  // Reduces x[0, n) into a Partial. Element i lies at row position
  // offset + i, or offset + where[i] for a block's gathered valid elements.
  Partial<V> ReduceDense(const V* x, std::size_t n, std::uint64_t offset, const std::uint32_t* where,
                         const HistogramSink* sinks) const {
    const auto at = [&](std::size_t i) {
      return static_cast<std::int64_t>(offset + (where != nullptr ? where[i] : i));
    };
    LaneTotals<V> t;
    fused_(x, n, &t);
    Partial<V> p;
    p.count = n;
    if constexpr (rules::kIsFloatValue<V>) {
      if (needs_.exact_sum || needs_.exact_squares) {
        const bool guess = Guesses(needs_.exact_sum, needs_.exact_squares);
        const BlockRange range =
            RangeOfBlock(x, n, /*skip_nan=*/false, extremes_in_range_ ? &t : nullptr,
                         guess ? RangeGuess() : kNoRangeGuess, SplitsFor(needs_.exact_sum, needs_.exact_squares));
        if (needs_.exact_sum) AddExactBlock(x, n, /*skip_nan=*/false, n, range, p.exact_sum);
        if (needs_.exact_squares) AddExactSquares(x, n, /*skip_nan=*/false, n, range, p.exact_squares);
        if (guess) NoteRangeGuess(range);
      }
    } else {
      p.isum = static_cast<std::uint64_t>(t.sum);
      if (needs_.exact_sum || needs_.exact_squares) {
        const rules::IntegerSums sums = IntegerBlockSums(x, n, t.sum, needs_.exact_squares);
        if (needs_.exact_sum) p.exact_sum.AddIntegers(n, [&](const auto& put) { sums.PutSum(put); });
        if (needs_.exact_squares) p.exact_squares.AddIntegers(n, [&](const auto& put) { sums.PutSquares(put); });
      }
    }
    p.min = t.min;
    p.max = t.max;
    if (needs_.argmin) {
      const std::size_t i = FirstIndexOf(x, n, t.min);
      p.argmin = {x[i], at(i)};
    }
    if (needs_.argmax) {
      const std::size_t i = FirstIndexOf(x, n, t.max);
      p.argmax = {x[i], at(i)};
    }
    if constexpr (rules::kIsFloatValue<V>) {
      if (nan_fused_ != nullptr) ReduceNanBlock(x, n, at, p);
    }
    if (more_fused_ != nullptr) {
      MoreLaneTotals<V> m;
      more_fused_(x, n, &m);
      p.product = m.product;
      p.nonzero = m.nonzero;
    }
    for (std::size_t h = 0; h < binners_.size(); ++h) BinBlock(x, n, binners_[h], sinks[h]);
    return p;
  }

  // The NaN-skipping fields of a block's Partial (float dtypes only; their
  // means and variances come from the exact sums). A block without non-NaN
  // elements keeps the empty ones (no argmin candidate).
  template <typename At>
  void ReduceNanBlock(const V* x, std::size_t n, const At& at, Partial<V>& p) const {
    NanLaneTotals<V> t;
    nan_fused_(x, n, &t);
    p.nan_count = t.count;
    if (needs_.nan_exact_sum || needs_.nan_exact_squares) {
      const bool guess = Guesses(needs_.nan_exact_sum, needs_.nan_exact_squares);
      const BlockRange range = RangeOfBlock(x, n, /*skip_nan=*/true, nullptr, guess ? RangeGuess() : kNoRangeGuess,
                                            SplitsFor(needs_.nan_exact_sum, needs_.nan_exact_squares));
      if (needs_.nan_exact_sum) AddExactBlock(x, n, /*skip_nan=*/true, t.count, range, p.nan_exact_sum);
      if (needs_.nan_exact_squares) AddExactSquares(x, n, /*skip_nan=*/true, t.count, range, p.nan_exact_squares);
      if (guess) NoteRangeGuess(range);
    }
    p.nan_min = t.min;
    p.nan_max = t.max;
    if (t.count == 0) return;
    if (needs_.nan_argmin) {
      const std::size_t i = FirstIndexOf(x, n, t.min);  // t.min is not NaN
      p.nan_argmin = {x[i], at(i)};
    }
    if (needs_.nan_argmax) {
      const std::size_t i = FirstIndexOf(x, n, t.max);
      p.nan_argmax = {x[i], at(i)};
    }
  }

  // Reduces `len` elements of the row starting at row position `start`,
  // element `first` of the array (at most one chunk), read from `runs` at
  // byte `byte`, block by block, folding in block order.
  Partial<V> ReduceChunk(const HostRuns& runs, std::uint64_t byte, std::uint64_t len, std::uint64_t start,
                         std::uint64_t first, const HistogramSink* sinks) const {
    Partial<V> chunk;
    std::unique_ptr<V[]> bounce;
    Gathered<V> gathered;
    for (std::uint64_t b = 0; b < len; b += kBlock) {
      const std::uint64_t n = std::min(kBlock, len - b);
      Fold(chunk, ReduceBlock(BlockAt<V>(runs, byte + b * sizeof(V), n, bounce), n, start + b, first + b, sinks,
                              gathered));
    }
    return chunk;
  }

  // The element count of the next `bytes` bytes, read from `from`: host
  // memory, whole elements, within spec.length.
  absl::StatusOr<std::uint64_t> CheckNext(const Placement& from, std::uint64_t bytes) const {
    if (!from.host()) {
      return absl::FailedPreconditionError(absl::StrCat("the cpu backend cannot read ", from.Describe(), "."));
    }
    if (bytes % sizeof(V) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: ", bytes, " bytes is not a whole number of ", rules::Name(kD), " elements."));
    }
    if (bytes / sizeof(V) > plan_.array.length - consumed_) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: more than the ", plan_.array.length, " elements in spec.length."));
    }
    return bytes / sizeof(V);
  }

  // A contiguous piece as a view of one run.
  static HostRuns OneRun(const std::byte* p, std::uint64_t elements) {
    const Extent whole = Extent::PageableHost({p, static_cast<std::size_t>(elements * sizeof(V))});
    return HostRuns({&whole, 1});
  }

  // A block met one at a time: from the buffer, or around a piece's edges.
  void SequentialBlock(const V* x, std::uint64_t len, std::uint64_t start) {
    GrowRows(row_ + 1);
    RowSinks(row_, sinks_);
    Fold(chunk_acc_, ReduceBlock(x, len, start, plan_.array.RowStart(row_) + start, sinks_.data(), gathered_));
    pos_ = start + len;
    if (pos_ % kChunk == 0 || pos_ == row_len_) {
      Fold(row_acc_, chunk_acc_);
      chunk_acc_ = Partial<V>{};
    }
    if (pos_ == row_len_) EndRow();
  }

  // Short rows from row_ on, whole, that the next `left` elements hold:
  // all of them for equal rows; for segments, up to the first long one.
  std::uint64_t ShortRowsIn(std::uint64_t left) const {
    const ArraySpec& a = plan_.array;
    if (!a.variable()) return left / row_len_;
    const std::uint64_t start = a.RowStart(row_);
    std::uint64_t r = row_;
    while (r < rows_ && a.RowStart(r + 1) - start <= left && a.RowLength(r) <= CpuPolicy::kShortRowElements) ++r;
    return r - row_;
  }

  // Elements of the `rows` rows from row_ on.
  std::uint64_t ElementsOfRows(std::uint64_t rows) const {
    return plan_.array.RowStart(row_ + rows) - plan_.array.RowStart(row_);
  }

  // Whole short rows from byte `byte` of `runs`, in parallel, each reduced
  // by one thread, in groups of about kRowGroupElements elements.
  void ParallelRows(const HostRuns& runs, std::uint64_t byte, std::uint64_t rows) {
    const ArraySpec& a = plan_.array;
    const std::uint64_t first = row_;
    const std::uint64_t base = a.RowStart(first);
    const std::uint64_t elements = a.RowStart(first + rows) - base;
    const std::uint64_t group =
        std::max<std::uint64_t>(1, CpuPolicy::kRowGroupElements * rows / std::max<std::uint64_t>(elements, 1));
    GrowRows(first + rows);
    pool_->ParallelFor((rows + group - 1) / group, [&](std::size_t item, int) {
      std::vector<HistogramSink> sinks(binners_.size());
      const std::uint64_t end = std::min(rows, (item + 1) * group);
      for (std::uint64_t r = item * group; r < end; ++r) {
        RowSinks(first + r, sinks);
        Partial<V> row;
        Fold(row, ReduceChunk(runs, byte + (a.RowStart(first + r) - base) * sizeof(V), a.RowLength(first + r), 0,
                              a.RowStart(first + r), sinks.data()));
        FinishRow(first + r, row);
      }
    });
    row_ += rows;
    EnterRow();
  }

  // Whole chunks of one long row (the last may end the row short) from byte
  // `byte` of `runs`, in parallel; their partials are folded here in chunk
  // order.
  void ParallelChunks(const HostRuns& runs, std::uint64_t byte, std::uint64_t elements) {
    const std::size_t chunks = (elements + kChunk - 1) / kChunk;
    GrowRows(row_ + 1);
    partials_.resize(chunks);
    const bool scratch = chunks > 1 && !binners_.empty();
    if (scratch) {
      PrepareScratch();
    } else {
      RowSinks(row_, sinks_);
    }
    const std::uint64_t base = pos_;
    const std::uint64_t row_first = plan_.array.RowStart(row_);
    pool_->ParallelFor(chunks, [&](std::size_t i, int slot) {
      const HistogramSink* sinks =
          scratch ? scratch_sinks_.data() + static_cast<std::size_t>(slot) * binners_.size()
                  : sinks_.data();
      const std::uint64_t start = i * kChunk;
      const std::uint64_t len = std::min(kChunk, elements - start);
      partials_[i] = ReduceChunk(runs, byte + start * sizeof(V), len, base + start, row_first + base + start, sinks);
    });
    for (const Partial<V>& c : partials_) Fold(row_acc_, c);
    pos_ += elements;
    if (pos_ == row_len_) EndRow();
  }

  // Builds the results of rows up to `end` (zeroed, histograms with their
  // bins), as rows arrive: a header that declares many rows costs nothing
  // until their elements come. The vectors grow geometrically, so each row
  // costs a constant; the raw views in hist_outs_ follow them.
  void GrowRows(std::uint64_t end) {
    if (end <= rows_built_) return;
    for (std::size_t k = 0; k < values_.size(); ++k) {
      const OpSpec& op = ops_[k];
      std::visit(
          [&](auto& v) {
            using E = typename std::decay_t<decltype(v)>::value_type;
            // Geometric growth, as resize's own, but advised for huge pages
            // first (a group-by's million rows fault in 2 MiB steps).
            if (end > v.capacity()) ReserveHuge(v, std::max<std::size_t>(end, 2 * v.capacity()));
            v.resize(end);
            if constexpr (std::is_same_v<E, HistogramResult>) {
              for (std::uint64_t r = rows_built_; r < end; ++r) v[r].counts.assign(op.histogram.bins, 0);
            } else if constexpr (std::is_same_v<E, rules::PartialState>) {
              if (op.kind == OpKind::kHistogram) {
                for (std::uint64_t r = rows_built_; r < end; ++r) v[r].histogram.counts.assign(op.histogram.bins, 0);
              }
            }
          },
          values_[k]);
    }
    for (std::size_t h = 0; h < hist_ops_.size(); ++h) {
      OpValues& v = values_[static_cast<std::size_t>(hist_ops_[h])];
      if (auto* states = std::get_if<std::vector<rules::PartialState>>(&v)) {
        hist_outs_[h] = {nullptr, states->data()};
      } else {
        hist_outs_[h] = {std::get<std::vector<HistogramResult>>(v).data(), nullptr};
      }
    }
    rows_built_ = end;
  }

  void RowSinks(std::uint64_t row, std::vector<HistogramSink>& sinks) const {
    sinks.resize(binners_.size());
    for (std::size_t h = 0; h < binners_.size(); ++h) {
      HistogramResult& r = hist_outs_[h].Row(row);
      sinks[h] = {r.counts.data(), &r.below, &r.above, &r.nan};
    }
  }

  // Per-thread histograms for a long row split across threads.
  void PrepareScratch() {
    if (scratch_.empty()) {
      const std::size_t slots = static_cast<std::size_t>(pool_->participants());
      scratch_.resize(slots * binners_.size());
      scratch_sinks_.resize(scratch_.size());
      for (std::size_t s = 0; s < slots; ++s) {
        for (std::size_t h = 0; h < binners_.size(); ++h) {
          HistogramResult& r = scratch_[s * binners_.size() + h];
          r.counts.assign(static_cast<std::size_t>(binners_[h].bins), 0);
          scratch_sinks_[s * binners_.size() + h] = {r.counts.data(), &r.below, &r.above, &r.nan};
        }
      }
    }
    scratch_dirty_ = true;
  }

  void MergeScratch(std::uint64_t row) {
    for (std::size_t s = 0; s < scratch_.size(); ++s) {
      HistogramResult& from = scratch_[s];
      HistogramResult& to = hist_outs_[s % binners_.size()].Row(row);
      for (std::size_t b = 0; b < from.counts.size(); ++b) to.counts[b] += from.counts[b];
      to.below += from.below;
      to.above += from.above;
      to.nan += from.nan;
      std::fill(from.counts.begin(), from.counts.end(), 0);
      from.below = from.above = from.nan = 0;
    }
    scratch_dirty_ = false;
  }

  void EndRow() {
    if (scratch_dirty_) MergeScratch(row_);
    FinishRow(row_, row_acc_);
    row_acc_ = Partial<V>{};
    ++row_;
    pos_ = 0;
    EnterRow();
  }

  // At the start of row_: takes its length and path. Empty segments are
  // finished here, since no element will end them.
  void EnterRow() {
    const ArraySpec& a = plan_.array;
    while (a.variable() && row_ < rows_ && a.RowLength(row_) == 0) {
      GrowRows(row_ + 1);
      FinishRow(row_, Partial<V>{});
      ++row_;
    }
    if (row_ < rows_) row_len_ = a.RowLength(row_);
    short_rows_ = a.segmented() && row_len_ <= CpuPolicy::kShortRowElements;
  }

  // Sets the state's extreme field for the dtype.
  static void PutExtreme(rules::PartialState& s, V v) {
    if constexpr (rules::kIsFloatValue<V>) {
      s.float_extreme = static_cast<double>(v);
    } else if constexpr (std::is_signed_v<V>) {
      s.int_extreme = static_cast<std::int64_t>(v);
    } else {
      s.uint_extreme = static_cast<std::uint64_t>(v);
    }
  }

  // A float sum's state: rounded once to float64, and its exact bytes
  // where the state is asked for (so merges stay exact).
  static void PutExactSum(const OpSpec& op, const rules::ExactAccumulator& sum, rules::PartialState& s) {
    s.float_sum = sum.Rounded(rules::kFloat64Format);
    if (op.partial) s.exact_sum = sum.ToExactSum().Bytes();
  }

  // A mean's state (every dtype's): the exact sum rounded once to float64, over the
  // count (s.count, set), and the exact sum's bytes for merges.
  static void PutExactMean(const OpSpec& op, const rules::ExactAccumulator& sum, rules::PartialState& s) {
    s.mean = sum.Rounded(rules::kFloat64Format) / static_cast<double>(s.count);
    if (op.partial) s.exact_sum = sum.ToExactSum().Bytes();
  }

  // A variance's state (every dtype's): mean and m2 from the exact sums
  // (rules::PutExactMoments), and both sums' bytes for merges.
  static void PutExactMoments(const OpSpec& op, const rules::ExactAccumulator& sum,
                              const rules::ExactAccumulator& squares, rules::PartialState& s) {
    const rules::ExactSum exact_sum = sum.ToExactSum(), exact_squares = squares.ToExactSum();
    rules::PutExactMoments(exact_sum, exact_squares, s);
    if (op.partial) {
      s.exact_sum = exact_sum.Bytes();
      s.exact_sum_squares = exact_squares.Bytes();
    }
  }

  // ptp's max, beside its min in the extreme fields.
  static void PutMax(rules::PartialState& s, V v) {
    if constexpr (rules::kIsFloatValue<V>) {
      s.float_max = static_cast<double>(v);
    } else if constexpr (std::is_signed_v<V>) {
      s.int_max = static_cast<std::int64_t>(v);
    } else {
      s.uint_max = static_cast<std::uint64_t>(v);
    }
  }

  // One op's state of a row from the row's fold (histograms aside: they
  // are binned in place as the blocks go by).
  static rules::PartialState StateOf(const OpSpec& op, const Partial<V>& acc) {
    rules::PartialState s;
    // A NaN-skipping op's state covers the non-NaN elements, and counts
    // every element besides.
    s.count = rules::IsNanSkipping(op.kind) ? acc.nan_count : acc.count;
    if (rules::IsNanSkipping(op.kind)) s.elements = acc.count;
    if (s.count == 0) return s;  // the empty state: sums 0, no extreme, index -1
    switch (op.kind) {
      case OpKind::kSum:
        if constexpr (rules::kIsFloatValue<V>) {
          PutExactSum(op, acc.exact_sum, s);
        } else if constexpr (std::is_signed_v<V>) {
          s.int_sum = static_cast<std::int64_t>(acc.isum);
        } else {
          s.uint_sum = acc.isum;
        }
        break;
      case OpKind::kMin: PutExtreme(s, acc.min); break;
      case OpKind::kMax: PutExtreme(s, acc.max); break;
      case OpKind::kMean: PutExactMean(op, acc.exact_sum, s); break;
      case OpKind::kSumSquares:
        s.sum_squares = acc.exact_squares.Rounded(rules::kFloat64Format);
        if (op.partial) s.exact_sum_squares = acc.exact_squares.ToExactSum().Bytes();
        break;
      case OpKind::kVariance:
      case OpKind::kStddev: PutExactMoments(op, acc.exact_sum, acc.exact_squares, s); break;
      case OpKind::kArgmin:
        PutExtreme(s, acc.argmin.value);
        s.index = acc.argmin.index + static_cast<std::int64_t>(op.base_index);
        break;
      case OpKind::kArgmax:
        PutExtreme(s, acc.argmax.value);
        s.index = acc.argmax.index + static_cast<std::int64_t>(op.base_index);
        break;
      case OpKind::kCount:
      case OpKind::kHistogram:
      case OpKind::kNanCount: break;
      case OpKind::kNanSum: PutExactSum(op, acc.nan_exact_sum, s); break;
      case OpKind::kNanMin: PutExtreme(s, acc.nan_min); break;
      case OpKind::kNanMax: PutExtreme(s, acc.nan_max); break;
      case OpKind::kNanMean: PutExactMean(op, acc.nan_exact_sum, s); break;
      case OpKind::kNanVariance:
      case OpKind::kNanStddev: PutExactMoments(op, acc.nan_exact_sum, acc.nan_exact_squares, s); break;
      case OpKind::kNanArgmin:
        PutExtreme(s, acc.nan_argmin.value);
        s.index = acc.nan_argmin.index + static_cast<std::int64_t>(op.base_index);
        break;
      case OpKind::kNanArgmax:
        PutExtreme(s, acc.nan_argmax.value);
        s.index = acc.nan_argmax.index + static_cast<std::int64_t>(op.base_index);
        break;
      case OpKind::kProduct:
        if constexpr (rules::kIsFloatValue<V>) {
          s.float_product = acc.product;
        } else if constexpr (std::is_signed_v<V>) {
          s.int_product = static_cast<std::int64_t>(acc.product);
        } else {
          s.uint_product = acc.product;
        }
        break;
      case OpKind::kCountNonzero:
      case OpKind::kAny:
      case OpKind::kAll: s.nonzero = acc.nonzero; break;
      case OpKind::kPtp:  // the difference is the finish's (rules::PtpOf), so the state merges
        PutExtreme(s, acc.min);
        PutMax(s, acc.max);
        break;
      case OpKind::kMinMax: break;  // a plan holds no kMinMax (ValidatePlan)
      // Functions with states of their own (functions/state_reduction.cc).
      case OpKind::kQuantile:
      case OpKind::kNanQuantile:
      case OpKind::kMedian:
      case OpKind::kNanMedian:
      case OpKind::kTopK:
      case OpKind::kBottomK:
      case OpKind::kHll:
      case OpKind::kDdSketch:
      case OpKind::kCountDistinct:
      case OpKind::kMode: break;
    }
    return s;
  }

  // The binade of the last block's largest magnitude on this thread:
  // blocks of one array mostly share it, so RangeOfBlock splits float32's
  // squares and float64's elements and squares at its grids in the range
  // pass. A wrong guess costs the block a second pass, never a bit
  // (AddExactSquares and AddExactBlock check it). Guesses(): whether this
  // dtype's range pass has a split to take (float32: squares; float64:
  // elements and squares); SplitsFor(): which.
  static bool Guesses(bool exact_sum, bool exact_squares) {
    if constexpr (std::is_same_v<V, float>) return exact_squares;
    if constexpr (std::is_same_v<V, double>) return exact_sum || exact_squares;
    return false;
  }
  static unsigned SplitsFor(bool exact_sum, bool exact_squares) {
    return (exact_sum ? kSplitElements : 0u) | (exact_squares ? kSplitSquares : 0u);
  }
  static int& RangeGuess() {
    thread_local int e = kNoRangeGuess;
    return e;
  }
  static void NoteRangeGuess(const BlockRange& range) {
    if (range.not_finite || range.top == 0.0) return;
    int e = 0;
    std::frexp(range.top, &e);
    RangeGuess() = e;
  }

  // Notes that `row` is all NaN, for ops that have no value on one; the
  // lowest such row is named, whichever thread finishes it.
  void NoteAllNan(std::uint64_t row) { NoteLowest(all_nan_row_, row); }

  static void NoteLowest(std::atomic<std::uint64_t>& lowest, std::uint64_t row) {
    std::uint64_t seen = lowest.load();
    while (row < seen && !lowest.compare_exchange_weak(seen, row)) {
    }
  }

  const OpSpec& FirstNeedingNonNan() const {
    return *std::find_if(ops_.begin(), ops_.end(), [](const OpSpec& op) { return rules::NeedsNonNan(op); });
  }

  // Writes every op's result for `row`: its value or its partial state.
  // Histograms are already binned in place; a partial one takes its count.
  // Rows are written by one thread each, several rows at once.
  void FinishRow(std::uint64_t row, const Partial<V>& acc) {
    for (std::size_t k = 0; k < ops_.size(); ++k) {
      const OpSpec& op = ops_[k];
      if (rules::NeedsNonNan(op) && acc.nan_count == 0 && acc.count > 0) NoteAllNan(row);
      if (mask_ && rules::NeedsNonEmpty(op) && acc.count == 0) NoteLowest(no_valid_row_, row);
      if (op.kind == OpKind::kHistogram) {
        if (op.partial) std::get<std::vector<rules::PartialState>>(values_[k])[row].count = acc.count;
        continue;
      }
      StoreRow(op, kD, row, StateOf(op, acc), values_[k]);
    }
  }

  static constexpr std::uint64_t kNoRow = std::numeric_limits<std::uint64_t>::max();
  // int64 and uint64: a block's native sum can overflow, so the exact sum
  // behind means and moments is taken in 128 bits (IntegerBlockSums).
  static constexpr bool kWideInteger = std::is_integral_v<V> && sizeof(V) == 8;

  const AggregationPlan plan_;
  const std::vector<OpSpec> ops_;  // plan_.ops as this dtype computes them (EffectiveOps)
  ThreadPool* const pool_;
  const std::string device_;
  const Needs needs_;
  FusedFn<V> fused_ = nullptr;
  bool extremes_in_range_ = false;  // min and max from the exact range pass (float32, float64)
  NanFn<V> nan_fused_ = nullptr;  // float dtypes with NaN-skipping ops only
  MoreFn<V> more_fused_ = nullptr;  // plans with prod, count_nonzero, any or all only

  // The lowest all-NaN row, when an op has no value on one (nanargmin).
  std::atomic<std::uint64_t> all_nan_row_{kNoRow};
  // The lowest row whose elements are all masked out, when an op has no
  // value on an empty one (min).
  std::atomic<std::uint64_t> no_valid_row_{kNoRow};
  std::optional<MaskBits> mask_;  // the plan's validity mask, if any

  // The current row's length (the whole array's when not segmented) and
  // whether it takes the short rows' path (EnterRow).
  std::uint64_t row_len_ = 0;
  std::uint64_t rows_ = 0;
  bool short_rows_ = false;

  std::vector<OpValues> values_;  // the results, one per op
  std::uint64_t rows_built_ = 0;  // rows values_ holds so far
  std::vector<Binner> binners_;
  std::vector<int> hist_ops_;              // the op of each binner
  std::vector<HistogramOut> hist_outs_;    // raw views of their results in values_

  // Where the stream is: elements received, current row, position in it.
  std::uint64_t consumed_ = 0;
  std::uint64_t row_ = 0;
  std::uint64_t pos_ = 0;
  Partial<V> row_acc_{};    // the row's complete chunks, folded
  Partial<V> chunk_acc_{};  // the current chunk's complete blocks, folded
  std::vector<V> buffer_;   // the current block, while it is incomplete
  std::unique_ptr<V[]> bounce_;  // misaligned pieces of a block met one at a time
  Gathered<V> gathered_;         // a masked block met one at a time

  std::vector<Partial<V>> partials_;  // one dispatch's chunk partials
  std::vector<HistogramSink> sinks_;
  std::vector<HistogramResult> scratch_;  // [slot][histogram op]
  std::vector<HistogramSink> scratch_sinks_;
  bool scratch_dirty_ = false;
};

}  // namespace

std::unique_ptr<Reduction> MakeReduction(const AggregationPlan& plan, ThreadPool* pool,
                                         std::string device) {
  return rules::VisitDType(plan.array.dtype, [&](auto dt) -> std::unique_ptr<Reduction> {
    return std::make_unique<CpuReduction<decltype(dt)::value>>(plan, pool, std::move(device));
  });
}

}  // namespace tally::cpu
