#include "server/engine/cuda/segment_reduction.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/engine/cuda/cuda_resources.h"
#include "spdlog/spdlog.h"
#include "server/engine/cuda/stream_buffer.h"
#include "server/engine/finish.h"
#include "server/engine/huge_pages.h"
#include "tally/kernels/segmented.h"

namespace tally::cuda {
namespace {

using rules::Bit;
using rules::OpKind;

constexpr rules::OpMask kSegmentOps =
    Bit(OpKind::kSum) | Bit(OpKind::kMin) | Bit(OpKind::kMax) | Bit(OpKind::kMean) | Bit(OpKind::kCount);

// The offsets lead the lane's state; the results follow at this alignment
// (the kernels' layout aligns its fields to 256 bytes from its base).
constexpr std::size_t kResultAlign = 256;

std::size_t ResultsAt(std::uint64_t segments) {
  const std::size_t offsets = (segments + 1) * sizeof(std::int64_t);
  return (offsets + kResultAlign - 1) / kResultAlign * kResultAlign;
}

kernels::SegmentedPlan KernelPlanOf(const AggregationPlan& plan) {
  kernels::SegmentedPlan k;
  k.dtype = plan.array.dtype;
  k.length = plan.array.length;
  k.segments = plan.array.rows();
  for (const OpSpec& op : plan.ops) k.ops |= Bit(op.kind);
  return k;
}

class SegmentReduction final : public Reduction {
 public:
  // `state` and `scratch`: the bytes this plan needs; past the lane's, the
  // reduction takes its own from the device's pool when it runs.
  SegmentReduction(const AggregationPlan& plan, DevicePool::Lease lease, EngineContext* engine, std::size_t state,
                   std::size_t scratch)
      : plan_(plan),
        kplan_(KernelPlanOf(plan)),
        layout_(kernels::LayoutOf(kplan_)),
        lease_(std::move(lease)),
        lane_(lease_.lane()),
        engine_(engine),
        state_(state),
        scratch_(scratch) {}

  absl::Status Consume(const Extent& piece) override {
    if (piece.placement.memory != Memory::kDevice || piece.placement.device != lane_->device()) {
      return absl::FailedPreconditionError(absl::StrCat("cuda backend: segments on GPU ", lane_->device(),
                                                        " were handed ", piece.placement.Describe(), "."));
    }
    if (piece.size() == 0) return absl::OkStatus();
    if (data_ != nullptr && piece.bytes.data() != data_ + consumed_) {
      return absl::InvalidArgumentError("cuda backend: segments' device bytes must be one contiguous array.");
    }
    if (consumed_ + piece.size() > plan_.array.bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: more than the ", plan_.array.length, " elements in spec.length."));
    }
    if (data_ == nullptr) data_ = piece.bytes.data();
    consumed_ += piece.size();
    return absl::OkStatus();
  }

  std::size_t element_size() const override { return rules::SizeOf(plan_.array.dtype); }

  absl::StatusOr<AggregationResult> Finish() override {
    const ArraySpec& a = plan_.array;
    if (consumed_ != a.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("data: received ", consumed_ / element_size(), " of the ",
                                                     a.length, " elements in spec.length."));
    }
    const std::uint64_t segments = a.rows();
    // Where a group-by's millions of segments spend their time (trace).
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    Clock::time_point t_state = t0, t_back = t0;
    const auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    ScopedDevice on(lane_->device());
    const cudaStream_t stream = lane_->compute_stream().get();
    // Many segments (a group-by's groups) or a long array: state and
    // scratch of this reduction's own, from the device's stream-ordered
    // pool, given back when it ends.
    std::byte* state = lane_->state();
    std::byte* scratch = lane_->scratch();
    result_ = lane_->result();
    if (state_ > lane_->state_bytes() || scratch_ > lane_->scratch_bytes()) {
      if (KeepPoolMemory(lane_->device()) != cudaSuccess ||
          StreamBuffer::Create(state_, lane_->compute_stream(), &own_state_) != cudaSuccess ||
          StreamBuffer::Create(scratch_, lane_->compute_stream(), &own_scratch_) != cudaSuccess) {
        (void)cudaGetLastError();
        return absl::ResourceExhaustedError(absl::StrCat("GPU ", lane_->device(), " has no room for the ", state_ + scratch_,
                                                         " bytes of state and scratch of ", segments, " segments."));
      }
      state = own_state_.data();
      scratch = own_scratch_.data();
      // Not zeroed (the copy back writes every byte), and in huge pages:
      // first touched in 4 KiB pages it took 45-64 ms per 3.4M segments on
      // an H100 host, longer than the segments' kernels and copies.
      own_result_ = std::make_unique_for_overwrite<std::byte[]>(layout_.bytes);
      AdviseHugePages(own_result_.get(), layout_.bytes);
      result_ = own_result_.get();
    }
    std::byte* const results = state + ResultsAt(segments);
    t_state = Clock::now();
    if (a.length > 0) {  // else every segment is empty: nothing to read
      const std::vector<std::uint64_t>& offsets = *a.offsets;  // checked: as int64, the same bits
      if (const cudaError_t e = cudaMemcpyAsync(state, offsets.data(), offsets.size() * sizeof(std::int64_t),
                                                cudaMemcpyHostToDevice, stream);
          e != cudaSuccess) {
        return LaneFailure(engine_, lane_, e, "copying the offsets");
      }
      if (const cudaError_t e = kernels::AggregateSegments(kplan_, data_,
                                                           reinterpret_cast<const std::int64_t*>(state), results,
                                                           scratch, scratch_, stream);
          e != cudaSuccess) {
        return LaneFailure(engine_, lane_, e, "reducing the segments");
      }
      if (const cudaError_t e = cudaMemcpyAsync(result_, results, layout_.bytes, cudaMemcpyDeviceToHost,
                                                stream);
          e != cudaSuccess) {
        return LaneFailure(engine_, lane_, e, "copying the results back");
      }
      if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
        return LaneFailure(engine_, lane_, e, "waiting for the segments");
      }
    }
    t_back = Clock::now();
    AggregationResult result;
    result.backend = "cuda";
    result.device = engine_->devices->DeviceName(lane_->device());
    for (const OpSpec& op : plan_.ops) {
      OpValues values = EmptyValues(op, a.dtype, segments);
      if (!StoreDirect(op, segments, values)) {
        StoreRows(op, a.dtype, segments, [&](std::uint64_t s) { return StateOf(op, s); }, values);
      }
      result.values.push_back(std::move(values));
    }
    spdlog::trace("cuda segments: {} segments, {} result bytes: state {:.3f} ms, offsets in, kernels and results back "
                  "{:.3f} ms, answers stored {:.3f} ms",
                  segments, layout_.bytes, ms(t0, t_state), ms(t_state, t_back), ms(t_back, Clock::now()));
    return result;
  }

 private:
  // Field `field` of segment s from the results copied back.
  kernels::Scalar At(std::size_t field, std::uint64_t s) const {
    kernels::Scalar v;
    std::memcpy(&v, result_ + field + s * sizeof(kernels::Scalar), sizeof(v));
    return v;
  }

  // The values StateOf and StoreRows give, straight from the results, for
  // the common case (sum, min, max, mean and count of a 32- or 64-bit
  // dtype, no partial state): no state per segment, which a group-by's
  // millions of segments made the largest cost. False: not that case.
  bool StoreDirect(const OpSpec& op, std::uint64_t segments, OpValues& values) const {
    const DType dt = plan_.array.dtype;
    if (op.partial || rules::SizeOf(dt) < 4) return false;
    std::size_t field = 0;
    switch (op.kind) {
      case OpKind::kSum: field = layout_.sum; break;
      case OpKind::kMin: field = layout_.min; break;
      case OpKind::kMax: field = layout_.max; break;
      case OpKind::kMean: field = layout_.dsum; break;
      case OpKind::kCount: break;
      default: return false;
    }
    const ArraySpec& a = plan_.array;
    return std::visit(
        [&](auto& v) {
          using E = typename std::decay_t<decltype(v)>::value_type;
          if constexpr (std::is_same_v<E, double> || std::is_same_v<E, std::int64_t> ||
                        std::is_same_v<E, std::uint64_t>) {
            // The member of the kernels' Scalar that the result type holds.
            const bool fits = op.kind == OpKind::kCount ? std::is_same_v<E, std::uint64_t>
                              : op.kind == OpKind::kMean ? std::is_same_v<E, double>
                              : rules::IsFloat(dt)       ? std::is_same_v<E, double>
                              : rules::IsSigned(dt)      ? std::is_same_v<E, std::int64_t>
                                                         : std::is_same_v<E, std::uint64_t>;
            if (!fits) return false;
            if (op.kind == OpKind::kSum || op.kind == OpKind::kMin || op.kind == OpKind::kMax) {
              // The field's column is already the answers' bits (Scalars
              // of the result's type, one per segment): one copy, then
              // the empty segments' zeros (the kernels leave identities).
              static_assert(sizeof(E) == sizeof(kernels::Scalar));
              std::memcpy(v.data(), result_ + field, segments * sizeof(E));
              for (std::uint64_t s = 0; s < segments; ++s) {
                if (a.RowLength(s) == 0) v[s] = E{};
              }
              return true;
            }
            for (std::uint64_t s = 0; s < segments; ++s) {
              const std::uint64_t count = a.RowLength(s);
              if (op.kind == OpKind::kCount) {
                v[s] = static_cast<E>(count);
              } else if (count == 0) {
                v[s] = op.kind == OpKind::kMean ? static_cast<E>(__builtin_nan("")) : E{};
              } else if (op.kind == OpKind::kMean) {
                v[s] = static_cast<E>(At(field, s).f64 / static_cast<double>(count));
              } else if constexpr (std::is_same_v<E, double>) {
                v[s] = At(field, s).f64;
              } else if constexpr (std::is_same_v<E, std::int64_t>) {
                v[s] = At(field, s).i64;
              } else {
                v[s] = At(field, s).u64;
              }
            }
            return true;
          } else {
            return false;
          }
        },
        values);
  }

  // The op's state of segment s, as the other reductions build theirs.
  rules::PartialState StateOf(const OpSpec& op, std::uint64_t s) const {
    const ArraySpec& a = plan_.array;
    rules::PartialState state;
    state.count = a.RowLength(s);
    if (state.count == 0) return state;  // the empty state: sums 0, no extreme
    const DType dt = a.dtype;
    switch (op.kind) {
      case OpKind::kSum: PutScalar(dt, At(layout_.sum, s), state.float_sum, state.int_sum, state.uint_sum); break;
      case OpKind::kMin: PutScalar(dt, At(layout_.min, s), state.float_extreme, state.int_extreme, state.uint_extreme); break;
      case OpKind::kMax: PutScalar(dt, At(layout_.max, s), state.float_extreme, state.int_extreme, state.uint_extreme); break;
      case OpKind::kMean: state.mean = At(layout_.dsum, s).f64 / static_cast<double>(state.count); break;
      default: break;  // kCount: the count alone; no other op reaches here (SegmentKernelsCompute)
    }
    return state;
  }

  const AggregationPlan plan_;
  const kernels::SegmentedPlan kplan_;
  const kernels::SegmentedLayout layout_;
  DevicePool::Lease lease_;
  DeviceLane* const lane_;
  EngineContext* const engine_;
  const std::size_t state_;
  const std::size_t scratch_;
  StreamBuffer own_state_, own_scratch_;
  std::unique_ptr<std::byte[]> own_result_;
  std::byte* result_ = nullptr;  // where the results came back: the lane's, or own_result_
  const std::byte* data_ = nullptr;
  std::uint64_t consumed_ = 0;  // bytes
};

}  // namespace

bool SegmentKernelsCompute(const AggregationPlan& plan) {
  for (const OpSpec& op : plan.ops) {
    if ((Bit(op.kind) & kSegmentOps) == 0) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<Reduction>> MakeSegmentReduction(const AggregationPlan& plan,
                                                               DevicePool::Lease lease, EngineContext* engine) {
  const kernels::SegmentedPlan kplan = KernelPlanOf(plan);
  if (kernels::Validate(kplan) != cudaSuccess) {
    return absl::InvalidArgumentError("cuda backend: the segmented kernels refuse this plan.");
  }
  const std::uint64_t segments = plan.array.rows();
  const std::size_t state = ResultsAt(segments) + kernels::LayoutOf(kplan).bytes;
  std::size_t scratch = 0;
  {
    ScopedDevice on(lease->device());
    if (kernels::SegmentedScratchBytes(kplan, &scratch) != cudaSuccess) {
      return absl::InternalError("cuda backend: sizing the segmented kernels' scratch failed.");
    }
  }
  return std::unique_ptr<Reduction>(std::make_unique<SegmentReduction>(plan, std::move(lease), engine, state, scratch));
}

}  // namespace tally::cuda
