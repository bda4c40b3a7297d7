// StartKeptOnDevice: the device passes of tally/kernels/select.h behind a
// Reduction, on a stream of its own (no lane: the array is already on the
// GPU, and the passes need no staging), with scratch from the device's
// stream-ordered pool taken at Start and given back when the reduction goes.
#include "server/engine/cuda/kept_on_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/cuda/cuda_resources.h"
#include "server/engine/cuda/device_pool.h"
#include "server/engine/cuda/staged_copy.h"
#include "server/engine/cuda/stream_buffer.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"
#include "tally/rules/agg/hll_state.h"
#include "tally/rules/agg/quantile_state.h"
#include "tally/rules/agg/state.h"
#include "tally/rules/agg/registry.h"

namespace tally::cuda {
namespace {

using rules::DType;
using rules::OpKind;
using rules::agg::RowAnswer;

// Ranks one selection takes at once (kernels::OrderStatistics' most): a
// plan's quantile ops share one counting pass and ask in batches of these.
constexpr std::size_t kRanksPerSelect = 4096;
// Places a segmented plan reads back at once (kernels::SortedSegments):
// 64 MB of places and bits, whatever the rows and q.
constexpr std::uint64_t kPlacesPerRead = std::uint64_t{1} << 22;

bool Covered(OpKind k) {
  switch (k) {
    case OpKind::kQuantile: case OpKind::kNanQuantile: case OpKind::kMedian: case OpKind::kNanMedian:
    case OpKind::kTopK: case OpKind::kBottomK: case OpKind::kHll: case OpKind::kDdSketch:
      return true;
    default:
      return false;
  }
}
bool IsQuantile(OpKind k) {
  return k == OpKind::kQuantile || k == OpKind::kNanQuantile || k == OpKind::kMedian || k == OpKind::kNanMedian;
}
bool SkipsNan(OpKind k) { return k == OpKind::kNanQuantile || k == OpKind::kNanMedian; }

// The ranks a quantile op may ask for, at most (QuantilePicks: two per q,
// two for a median).
std::size_t RanksAtMost(const OpSpec& op) {
  return op.kind == OpKind::kMedian || op.kind == OpKind::kNanMedian ? 2 : 2 * op.q.size();
}

absl::Status CudaFailure(const std::string& device, const char* what) {
  std::string where = LastErrorWhere();
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat("CUDA error on ", device, " while ", what, ": ", where));
}

// The scratch the plan's passes need, the largest of them (they run one
// after another on one stream).
cudaError_t ScratchFor(const AggregationPlan& plan, std::uint64_t places, std::size_t* bytes) {
  const kernels::DeviceArray shape{plan.array.dtype, nullptr, plan.array.length};
  if (plan.array.segmented()) return kernels::SortedSegments::ScratchBytes(shape, plan.array.rows(), places, bytes);
  std::size_t ranks = 0, most = 0;
  for (const OpSpec& op : plan.ops) {
    std::size_t need = 0;
    if (IsQuantile(op.kind)) {
      ranks += RanksAtMost(op);
      continue;
    }
    if (op.kind == OpKind::kHll) {
      TALLY_CUDA_TRY(kernels::HllScratchBytes(shape, op.precision, &need));
    } else if (op.kind == OpKind::kDdSketch) {
      TALLY_CUDA_TRY(kernels::DdSketchScratchBytes(shape, op.relative_accuracy, &need));
    } else {
      TALLY_CUDA_TRY(kernels::TopKScratchBytes(shape, op.k, &need));
    }
    most = std::max(most, need);
  }
  if (ranks > 0) {
    std::size_t need = 0;
    TALLY_CUDA_TRY(kernels::OrderStatistics::ScratchBytes(shape, std::min(ranks, kRanksPerSelect), &need));
    most = std::max(most, need);
  }
  *bytes = most;
  return cudaSuccess;
}

template <typename T>
T FromBits(std::uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);  // little-endian: the element's bytes are the low ones
  return v;
}

// The answer's vector a top-k of T's values go in, as TopKState::Finalize
// writes them: float64 for float dtypes, int64 or uint64 for integers.
template <typename T>
auto& ValuesOf(RowAnswer& answer) {
  if constexpr (std::is_floating_point_v<T>) {
    return answer.doubles;
  } else if constexpr (std::is_signed_v<T>) {
    return answer.int64s;
  } else {
    return answer.uint64s;
  }
}

// A whole array's answer as the op's values, moved in: a braced list
// (std::vector<RowAnswer>{answer}) copies its elements, top-k's 1 MB at
// k = 65536 among them.
std::vector<RowAnswer> OneRow(RowAnswer&& answer) {
  std::vector<RowAnswer> rows;
  rows.push_back(std::move(answer));
  return rows;
}

class KeptOnDevice final : public Reduction {
 public:
  KeptOnDevice(const AggregationPlan& plan, int device, std::string device_name, Stream stream,
               StreamBuffer scratch, std::size_t max_ranks, PinnedPool& pinned)
      : plan_(plan),
        size_(rules::SizeOf(plan.array.dtype)),
        device_(device),
        device_name_(std::move(device_name)),
        stream_(std::move(stream)),
        scratch_(std::move(scratch)),
        max_ranks_(max_ranks),
        pinned_(&pinned) {}

  ~KeptOnDevice() override {
    // Scratch and the gathered copy go back on the stream; nothing of ours
    // may still run when the array's owner frees it.
    ScopedDevice on(device_);
    TALLY_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_.get()));
  }

  std::size_t element_size() const override { return size_; }

  absl::Status Consume(const Extent& elements) override {
    if (elements.placement != Placement::Device(device_)) {
      return absl::FailedPreconditionError(absl::StrCat("the device pass of ", plan_.NameOf(0), " on GPU ", device_,
                                                        " was handed ", elements.placement.Describe(), "."));
    }
    if (received_ + elements.size() > plan_.array.bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: more than the ", plan_.array.bytes(), " bytes of spec.length."));
    }
    received_ += elements.size();
    if (elements.size() > 0) extents_.push_back(elements);
    return absl::OkStatus();
  }

  absl::StatusOr<AggregationResult> Finish() override {
    if (received_ != plan_.array.bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: received ", received_, " of the ", plan_.array.bytes(), " bytes declared."));
    }
    ScopedDevice on(device_);
    absl::StatusOr<kernels::DeviceArray> array = Array();
    if (!array.ok()) return array.status();
    AggregationResult result;
    result.values.resize(plan_.ops.size());
    absl::Status status;
    rules::VisitDType(plan_.array.dtype, [&](auto d) {
      using T = typename rules::Traits<decltype(d)::value>::value;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint32_t> ||
                    std::is_same_v<T, std::uint64_t>) {
        status = Run<T>(*array, result);
      } else {
        status = absl::InternalError("the device pass was started for a dtype it does not take.");
      }
    });
    if (!status.ok()) return status;
    result.backend = "cuda";
    result.device = device_name_;
    return result;
  }

 private:
  // The array as one run of device memory aligned to its element: the
  // extent itself, or the extents copied end to end into one buffer.
  absl::StatusOr<kernels::DeviceArray> Array() {
    const kernels::DeviceArray one{plan_.array.dtype, extents_.empty() ? nullptr : extents_.front().bytes.data(),
                                   plan_.array.length};
    if (extents_.size() == 1 && kernels::CheckSelectable(one) == cudaSuccess) return one;
    (void)cudaGetLastError();
    if (StreamBuffer::Create(plan_.array.bytes(), stream_.view(), &joined_) != cudaSuccess) {
      return CudaFailure(device_name_, "allocating a copy of the array's pieces");
    }
    std::uint64_t at = 0;
    for (const Extent& e : extents_) {
      if (Record(cudaMemcpyAsync(joined_.data() + at, e.bytes.data(), e.size(), cudaMemcpyDeviceToDevice,
                                 stream_.get()),
                 "cudaMemcpyAsync(piece)", __FILE__, __LINE__) != cudaSuccess) {
        return CudaFailure(device_name_, "joining the array's pieces");
      }
      at += e.size();
    }
    return kernels::DeviceArray{plan_.array.dtype, joined_.data(), plan_.array.length};
  }

  template <typename T>
  absl::Status Run(const kernels::DeviceArray& array, AggregationResult& result) {
    if (plan_.array.segmented()) return SegmentQuantiles<T>(array, result);
    if (absl::Status s = Quantiles<T>(array, result); !s.ok()) return s;
    for (std::size_t i = 0; i < plan_.ops.size(); ++i) {
      const OpSpec& op = plan_.ops[i];
      RowAnswer answer;
      if (op.kind == OpKind::kTopK || op.kind == OpKind::kBottomK) {
        if (absl::Status s = TopK<T>(array, op, answer); !s.ok()) return s;
      } else if (op.kind == OpKind::kHll) {
        if (absl::Status s = Hll(array, op, answer); !s.ok()) return s;
      } else if (op.kind == OpKind::kDdSketch) {
        if (absl::Status s = DdSketch(array, op, answer); !s.ok()) return s;
      } else {
        continue;  // a quantile op, answered above
      }
      result.values[i] = OneRow(std::move(answer));
    }
    return absl::OkStatus();
  }

  // Every quantile op of the plan from one counting pass: the ranks each
  // needs (QuantilePicks, from the NaN count), selected together, and each
  // op's answers computed from them by QuantilePicks::Answer.
  template <typename T>
  absl::Status Quantiles(const kernels::DeviceArray& array, AggregationResult& result) {
    if (std::none_of(plan_.ops.begin(), plan_.ops.end(), [](const OpSpec& op) { return IsQuantile(op.kind); })) {
      return absl::OkStatus();
    }
    kernels::OrderStatistics select(array, max_ranks_, scratch_.data(), scratch_.size(), stream_.get());
    // Where the ranks will lie, so that the counting pass gathers them (a
    // median's, a few quantiles'; more are left to a second read).
    std::vector<double> hints;
    for (const OpSpec& op : plan_.ops) {
      if (!IsQuantile(op.kind)) continue;
      if (op.kind == OpKind::kMedian || op.kind == OpKind::kNanMedian) {
        hints.push_back(0.5);
      } else {
        hints.insert(hints.end(), op.q.begin(), op.q.end());
      }
    }
    std::sort(hints.begin(), hints.end());
    hints.erase(std::unique(hints.begin(), hints.end()), hints.end());
    std::uint64_t nan = 0;
    if (select.Count(&nan, hints) != cudaSuccess) return CudaFailure(device_name_, "counting for a quantile");
    const std::uint64_t numbers = array.length - nan;
    std::vector<rules::agg::quantile_detail::QuantilePicks> picks;
    std::vector<std::uint64_t> ranks;
    for (const OpSpec& op : plan_.ops) {
      if (!IsQuantile(op.kind)) continue;
      picks.emplace_back(op, numbers, nan, SkipsNan(op.kind));
      ranks.insert(ranks.end(), picks.back().ranks().begin(), picks.back().ranks().end());
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    std::vector<std::uint64_t> bits(ranks.size());
    for (std::size_t at = 0; at < ranks.size(); at += max_ranks_) {
      const std::size_t take = std::min(max_ranks_, ranks.size() - at);
      if (select.Select(std::span(ranks).subspan(at, take), std::span(bits).subspan(at, take)) != cudaSuccess) {
        return CudaFailure(device_name_, "selecting a quantile's elements");
      }
    }
    const auto at = [&](std::uint64_t rank) {
      return FromBits<T>(bits[std::lower_bound(ranks.begin(), ranks.end(), rank) - ranks.begin()]);
    };
    std::size_t next = 0;
    for (std::size_t i = 0; i < plan_.ops.size(); ++i) {
      if (!IsQuantile(plan_.ops[i].kind)) continue;
      RowAnswer answer;
      if (std::optional<std::string> none = picks[next++].template Answer<T>(at, answer)) {
        return absl::InvalidArgumentError(absl::StrCat(plan_.NameOf(i), ": ", *none));
      }
      result.values[i] = OneRow(std::move(answer));
    }
    return absl::OkStatus();
  }

  // Every row's or segment's quantile ops (a segmented plan holds no other,
  // StartKeptOnDevice): each segment sorted once on the device, then per op
  // the ranks its QuantilePicks need, read back in batches of at most
  // max_ranks_ places, and each row answered by QuantilePicks::Answer, as
  // the host's states answer it.
  template <typename T>
  absl::Status SegmentQuantiles(const kernels::DeviceArray& array, AggregationResult& result) {
    const ArraySpec& a = plan_.array;
    const std::uint64_t rows = a.rows();
    std::vector<std::uint64_t> offsets(rows + 1), nan(rows);
    for (std::uint64_t r = 0; r < rows; ++r) offsets[r] = a.RowStart(r);
    offsets[rows] = a.length;
    kernels::SortedSegments sorted(array, rows, max_ranks_, scratch_.data(), scratch_.size(), stream_.get());
    if (sorted.Sort(offsets, nan) != cudaSuccess) return CudaFailure(device_name_, "sorting the segments");
    std::vector<std::uint64_t> places, bits;
    for (std::size_t i = 0; i < plan_.ops.size(); ++i) {
      const OpSpec& op = plan_.ops[i];
      std::vector<RowAnswer> answers(rows);
      for (std::uint64_t first = 0; first < rows;) {
        // Rows whose places fit one read.
        std::vector<rules::agg::quantile_detail::QuantilePicks> picks;
        places.clear();
        std::uint64_t r = first;
        for (; r < rows; ++r) {
          const std::uint64_t numbers = offsets[r + 1] - offsets[r] - nan[r];
          rules::agg::quantile_detail::QuantilePicks p(op, numbers, nan[r], SkipsNan(op.kind));
          if (!places.empty() && places.size() + p.ranks().size() > max_ranks_) break;
          for (const std::uint64_t rank : p.ranks()) places.push_back(offsets[r] + rank);
          picks.push_back(std::move(p));
        }
        bits.resize(places.size());
        if (sorted.Elements(places, bits) != cudaSuccess) {
          return CudaFailure(device_name_, "reading a segment's quantile elements");
        }
        std::size_t base = 0;
        for (std::uint64_t row = first; row < r; ++row) {
          const auto& p = picks[row - first];
          const auto at = [&](std::uint64_t rank) {
            const auto& ranks = p.ranks();
            return FromBits<T>(bits[base + (std::lower_bound(ranks.begin(), ranks.end(), rank) - ranks.begin())]);
          };
          if (std::optional<std::string> none = p.template Answer<T>(at, answers[row])) {
            return absl::InvalidArgumentError(
                absl::StrCat(plan_.NameOf(i), ": ", a.RowWord(), " ", row, ": ", *none));
          }
          base += p.ranks().size();
        }
        first = r;
      }
      result.values[i] = std::move(answers);
    }
    return absl::OkStatus();
  }

  // The k entries the device found, in its order, which is the host
  // state's (topk_state.h, Before: NaN first in topk and last in bottomk,
  // ties by index), written as TopKState::Finalize writes them: values as
  // float64 for float dtypes, int64 or uint64 for integers, indices offset
  // by base_index. (Handing the entries to the host state to finalize sorts
  // them again: 2.8 to 9 ms of server time at k = 65536 on 2^28 elements,
  // tally-kept-bench. The GPU tests compare the two answers bitwise.)
  template <typename T>
  absl::Status TopK(const kernels::DeviceArray& array, const OpSpec& op, RowAnswer& answer) {
    // The entries come over through the GPU's pinned staging blocks
    // (CopyAllToHost) straight into the answer's vectors (8-byte slots
    // each), converted in place after. At k = 65536 a copy into pageable
    // memory through the driver's staging, or vectors of their own filled
    // and then copied, each cost about 0.3-0.5 ms of the server's time
    // (tally-kept-bench, server path against the kernel call).
    const std::uint64_t* d_bits = nullptr;
    const std::uint64_t* d_index = nullptr;
    std::uint64_t count = 0;
    if (kernels::TopKOnDevice(array, op.k, op.kind == OpKind::kTopK, scratch_.data(), scratch_.size(),
                              stream_.get(), &d_bits, &d_index, &count) != cudaSuccess) {
      return CudaFailure(device_name_, "selecting topk or bottomk");
    }
    auto& values = ValuesOf<T>(answer);
    using Value = typename std::remove_reference_t<decltype(values)>::value_type;
    static_assert(sizeof(Value) == sizeof(std::uint64_t) && sizeof(std::int64_t) == sizeof(std::uint64_t));
    VectorTarget<Value> to_values(values);
    VectorTarget<std::int64_t> to_indices(answer.indices);
    const HostCopy copies[] = {{d_bits, sizeof(std::uint64_t) * count, &to_values},
                               {d_index, sizeof(std::uint64_t) * count, &to_indices}};
    if (absl::Status copied = CopyAllToHost(*pinned_, stream_.get(), copies); !copied.ok()) return copied;
    for (std::uint64_t i = 0; i < count; ++i) {
      std::uint64_t b = 0;
      std::memcpy(&b, &values[i], sizeof b);
      values[i] = static_cast<Value>(FromBits<T>(b));
      answer.indices[i] += static_cast<std::int64_t>(op.base_index);
    }
    return absl::OkStatus();
  }

  // The device's sketch read into the host state as its serialised form
  // (hll_state.h: dense registers, or the sorted distinct hashes), whose
  // Finalize answers.
  absl::Status Hll(const kernels::DeviceArray& array, const OpSpec& op, RowAnswer& answer) {
    kernels::HllSketch sketch;
    if (kernels::Hll(array, op.precision, scratch_.data(), scratch_.size(), stream_.get(), &sketch) != cudaSuccess) {
      return CudaFailure(device_name_, "computing hll");
    }
    const rules::agg::Function& f = rules::agg::Of(op.kind);
    std::string bytes;
    rules::agg::Writer w(bytes);
    rules::agg::PutHeader(w, f.wire, plan_.array.dtype, op);
    if (sketch.dense) {
      w.Put(rules::agg::hll_detail::kDense);
      w.PutBytes(sketch.registers.data(), sketch.registers.size());
    } else {
      w.Put(rules::agg::hll_detail::kSparse);
      w.Put(static_cast<std::uint64_t>(sketch.hashes.size()));
      w.PutBytes(sketch.hashes.data(), sketch.hashes.size() * sizeof(std::uint64_t));
    }
    std::unique_ptr<rules::agg::State> state = f.state->Init(op, plan_.array.dtype);
    if (std::optional<std::string> bad = state->Deserialize(bytes)) {
      return absl::InternalError(absl::StrCat("hll: the device's sketch does not read back: ", *bad));
    }
    if (std::optional<std::string> none = state->Finalize(answer)) return absl::InternalError(*none);
    return absl::OkStatus();
  }

  // The device's bucket counts read into the host state as its serialised
  // form (ddsketch_state.h: zeros, infinities, then each sign's buckets by
  // index), whose Finalize answers.
  absl::Status DdSketch(const kernels::DeviceArray& array, const OpSpec& op, RowAnswer& answer) {
    kernels::DdSketchCounts counts;
    if (kernels::DdSketch(array, op.relative_accuracy, scratch_.data(), scratch_.size(), stream_.get(), &counts) !=
        cudaSuccess) {
      return CudaFailure(device_name_, "computing ddsketch");
    }
    const rules::agg::Function& f = rules::agg::Of(op.kind);
    std::string bytes;
    rules::agg::Writer w(bytes);
    rules::agg::PutHeader(w, f.wire, plan_.array.dtype, op);
    w.Put(counts.zero);
    w.Put(counts.negative_inf);
    w.Put(counts.positive_inf);
    for (const auto* buckets : {&counts.negative, &counts.positive}) {
      w.Put(static_cast<std::uint64_t>(buckets->size()));
      for (const kernels::DdSketchCounts::Bucket& b : *buckets) {
        w.Put(b.index);
        w.Put(b.count);
      }
    }
    std::unique_ptr<rules::agg::State> state = f.state->Init(op, plan_.array.dtype);
    if (std::optional<std::string> bad = state->Deserialize(bytes)) {
      return absl::InternalError(absl::StrCat("ddsketch: the device's counts do not read back: ", *bad));
    }
    if (std::optional<std::string> none = state->Finalize(answer)) return absl::InternalError(*none);
    return absl::OkStatus();
  }

  const AggregationPlan plan_;
  const std::size_t size_;
  const int device_;
  const std::string device_name_;
  Stream stream_;          // first: the buffers below are given back on it
  StreamBuffer scratch_;
  StreamBuffer joined_;    // the pieces end to end, when there are several
  const std::size_t max_ranks_;  // ranks one selection takes; places one read of a segmented plan takes
  PinnedPool* const pinned_;     // the GPU's staging blocks, for answers that come back large (top-k's)
  std::vector<Extent> extents_;
  std::uint64_t received_ = 0;
};


}  // namespace

absl::StatusOr<std::unique_ptr<Reduction>> StartKeptOnDevice(const AggregationPlan& plan, const Placement& from,
                                                           const DevicePool& pool) {
  const auto unimplemented = [](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("no device pass: ", why));
  };
  if (from.memory != Memory::kDevice) return unimplemented("the bytes are not in GPU memory.");
  if (!pool.Uses(from.device)) {
    return absl::FailedPreconditionError(absl::StrCat("cuda backend: GPU ", from.device, " is not one of the devices in use."));
  }
  if (absl::Status health = pool.DeviceHealth(from.device); !health.ok()) return health;
  const ArraySpec& a = plan.array;
  if (a.masked()) return unimplemented("validity masks run on the host.");
  // Rows and segments: the quantile functions, each segment sorted.
  const std::uint64_t most = a.segmented() ? (std::uint64_t{1} << 31) : (std::uint64_t{1} << 32);
  if (a.length == 0 || a.length >= most) {
    return unimplemented(absl::StrCat("the device passes take 1 to ", most - 1, " elements", a.segmented() ? " in rows or segments." : "."));
  }
  if (!kernels::SelectSupports(a.dtype)) return unimplemented(absl::StrCat(rules::Name(a.dtype), " runs on the host."));
  std::size_t ranks = 0;
  for (const OpSpec& op : plan.ops) {
    if (!Covered(op.kind) || op.partial || (a.segmented() && !IsQuantile(op.kind))) {
      return unimplemented(absl::StrCat(rules::Name(op.kind), op.partial ? "'s partial state" : "",
                                        a.segmented() ? " per row or segment" : "", " runs on the host."));
    }
    if (IsQuantile(op.kind)) ranks += RanksAtMost(op);
  }
  // Places a read takes: a whole plan's ranks, or for rows and segments
  // every row's of the widest op, up to kPlacesPerRead.
  std::uint64_t places = std::min(std::max<std::size_t>(ranks, 1), kRanksPerSelect);
  if (a.segmented()) {
    std::uint64_t widest = 1;
    for (const OpSpec& op : plan.ops) widest = std::max<std::uint64_t>(widest, RanksAtMost(op));
    places = std::min(kPlacesPerRead, std::max(widest, a.rows() * widest));
  }
  ScopedDevice on(from.device);
  const std::string& name = pool.DeviceName(from.device);
  std::size_t bytes = 0;
  if (ScratchFor(plan, places, &bytes) != cudaSuccess) return CudaFailure(name, "sizing the device pass's scratch");
  if (KeepPoolMemory(from.device) != cudaSuccess) {
    // A device without stream-ordered allocation: the host steps instead.
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    return unimplemented(absl::StrCat("GPU ", from.device, "'s memory pool: ", where));
  }
  Stream stream;
  if (Stream::Create(&stream) != cudaSuccess) return CudaFailure(name, "creating the device pass's stream");
  StreamBuffer scratch;
  if (StreamBuffer::Create(bytes, stream.view(), &scratch) != cudaSuccess) {
    // The host steps need no GPU memory: let the router run them.
    const std::string where = LastErrorWhere();
    (void)cudaGetLastError();
    return unimplemented(absl::StrCat("GPU ", from.device, " has no ", bytes, " bytes of scratch free (", where, ")."));
  }
  return std::unique_ptr<Reduction>(
      std::make_unique<KeptOnDevice>(plan, from.device, name, std::move(stream), std::move(scratch), places,
                                     pool.pinned(from.device)));
}

}  // namespace tally::cuda
