// The CUDA Reduction, reading each kind of memory (server/engine/source.h)
// the cheapest way it can:
// - Pageable host bytes (the network's) are copied once, into pinned staging
//   blocks of exactly one device chunk each, cut at fixed global element
//   positions (multiples of the chunk): how Consume() pieces the array cannot
//   move a chunk boundary, so the kernels see the same chunks and give
//   bitwise the same results. A full block is copied to one of the lane's
//   device chunk buffers on the copy stream and folded by every pass on the
//   compute stream, so while block k is filled, chunk k-1 copies and chunk
//   k-2 is reduced. The host waits only before reusing a chunk buffer (for
//   the kernels of chunk k-3) and before refilling a pinned block (for the
//   copy that read it): memory per request is bounded by the lane, whatever
//   the array's size.
// - Pinned host bytes take the same chunks, but whole chunks are copied to
//   the device straight from where they lie, with no host copy; only a
//   piece's ragged ends are staged. Same cuts, so the same bits.
// - Received slices in the receive arena (pinned, server/receive_arena.h)
//   are copied into a device chunk buffer from where they lie, one copy per
//   slice, a chunk taking slices across a stream's messages until it is
//   full: again the same cuts.
// - Device bytes on the lane's GPU are reduced in place, in cuts of
//   `device_cut` elements (the whole array when its scratch fits the lane):
//   no copy at all.
#include "server/engine/cuda/cuda_reduction.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/engine/cuda/pass_results.h"
#include "server/engine/cuda/staging_block.h"
#include "server/engine/finish.h"
#include "server/engine/cuda/tuning.h"
#include "server/metrics/metrics.h"
#include "spdlog/spdlog.h"
#include "tally/kernels/cuda_error.h"

namespace tally::cuda {
namespace {

using rules::Bit;

// The kernel op bits for `k` over `dtype`: on integer dtypes the
// NaN-skipping ops are their plain ops (numpy's rule), as the kernels take
// them. Without a mask count is derived; with one a pass stores it. any
// and all read the nonzero count, ptp the min and the max.
rules::OpMask MaskOf(OpKind k, DType dtype, bool masked) {
  switch (k) {
    case OpKind::kCount: return masked ? Bit(k) : 0;
    case OpKind::kHistogram: return 0;  // histograms get their own pass
    case OpKind::kAny:
    case OpKind::kAll: return Bit(OpKind::kCountNonzero);
    case OpKind::kPtp: return Bit(OpKind::kMin) | Bit(OpKind::kMax);
    default: return Bit(rules::IsFloat(dtype) ? k : rules::PlainOf(k));
  }
}

// Errors after which the device (its context) is unusable.
bool IsSticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDeviceUninitialized:
    case cudaErrorExternalDevice:
    case cudaErrorTensorMemoryLeak: return true;
    default: return false;
  }
}

double ElapsedSeconds(const Event& from, const Event& to) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, from.get(), to.get()) != cudaSuccess) {
    (void)cudaGetLastError();  // timing is best effort
    return 0.0;
  }
  return static_cast<double>(ms) * 1e-3;
}

class CudaReduction final : public Reduction {
 public:
  CudaReduction(const AggregationPlan& plan, PassPlan passes, DevicePool::Lease lease,
                EngineContext* engine, std::uint64_t device_cut)
      : plan_(plan),
        passes_(ReadingMaskFrom(std::move(passes), lease.lane())),
        engine_(engine),
        lease_(std::move(lease)),
        lane_(lease_.lane()),
        pinned_(&engine->devices->pinned(lane_->device())),
        staging_(pinned_),
        elem_(rules::SizeOf(plan.array.dtype)),
        device_cut_(std::max<std::uint64_t>(device_cut, 1)) {}

  // The passes with their plans pointing at the mask's place in `lane`'s
  // state, where Launch() copies it before the first chunk.
  static PassPlan ReadingMaskFrom(PassPlan passes, DeviceLane* lane) {
    if (passes.mask_bytes > 0) {
      const auto* words = reinterpret_cast<const std::uint32_t*>(lane->state() + passes.mask_offset);
      for (Pass& pass : passes.passes) pass.plan.validity = words;
    }
    return passes;
  }

  ~CudaReduction() override {
    if (!lease_) return;
    ScopedDevice on(lane_->device());
    Drain();
    ReportMetrics(/*device_memory=*/false);
  }

  absl::Status Consume(const Extent& piece) override {
    absl::StatusOr<std::uint64_t> next = CheckNext(piece.size());
    if (!next.ok()) return next.status();
    const std::uint64_t n = *next;
    const bool on_device = piece.placement.memory == Memory::kDevice;
    if (on_device && piece.placement.device != lane_->device()) {
      return absl::FailedPreconditionError(absl::StrCat("cuda backend: a request on GPU ", lane_->device(),
                                                        " cannot read ", piece.placement.Describe(), "."));
    }
    if (on_device && (staging_.filled() > 0 || open_bytes_ > 0)) {
      return absl::FailedPreconditionError("cuda backend: device bytes after host bytes in one request.");
    }
    consumed_ += n;
    if (passes_.passes.empty() || n == 0) return absl::OkStatus();
    if (on_device) return ReduceInPlace(piece.bytes.data(), n);
    return ConsumeHost(piece.bytes.data(), n, piece.placement.memory == Memory::kPinnedHost);
  }

  // Runs of host memory present at once (a unary message's slices, or a
  // stream chunk's), cut into the same chunks as Consume() would cut them,
  // so the same bits. Runs in pinned memory (the receive arena) are copied
  // into the device's chunk buffer from where they lie, one copy per run,
  // with no CPU copy (CopyInPlace): a chunk opened that way takes the
  // following runs, of this call and the next ones (a stream's next
  // chunks), until it is full or the array ends. Any other chunk is gathered into a staging block
  // first, by several threads, a piece of at least
  // EnginePolicy::kParallelCopyBytes each, when the message is large enough
  // to share. Chunk k's copy to the device still overlaps chunk k+1's
  // filling.
  absl::Status ConsumeRuns(const HostRuns& runs) override {
    const bool share = engine_->copiers != nullptr && runs.size() >= 2 * EnginePolicy::kParallelCopyBytes;
    if (passes_.passes.empty() || (runs.pinned_bytes() == 0 && !share && open_bytes_ == 0)) {
      return Reduction::ConsumeRuns(runs);
    }
    absl::StatusOr<std::uint64_t> next = CheckNext(runs.size());
    if (!next.ok()) return next.status();
    consumed_ += *next;
    // The runs are valid only during this call (a stream's chunk is
    // released as soon as it returns): copies that read them where they lie
    // are waited for before it does, on every path. For a unary message the
    // wait costs nothing: Finish() would wait for them next.
    bool copied_in_place = false;
    struct WaitForInPlaceCopies {
      CudaReduction* self;
      const bool& copied;
      ~WaitForInPlaceCopies() {
        if (copied) self->WaitForCopies();
      }
    } wait{this, copied_in_place};
    const std::uint64_t block = pinned_->block_bytes();
    std::uint64_t at = 0;
    while (at < runs.size()) {
      // A device chunk open, or one to open: staging empty (so at a chunk
      // boundary) and the runs up to the next boundary all pinned.
      if (open_bytes_ > 0 ||
          (staging_.filled() == 0 && runs.Pinned(at, std::min<std::uint64_t>(block, runs.size() - at)))) {
        copied_in_place = true;
        absl::StatusOr<std::uint64_t> took = CopyInPlace(runs, at);
        if (!took.ok()) return took.status();
        at += *took;
        continue;
      }
      bool took_block = false;
      absl::StatusOr<std::span<std::byte>> room = staging_.Room(runs.size() - at, &took_block);
      if (!room.ok()) return failed_ = room.status();
      if (took_block) ReportPinned();
      const std::span<std::byte> to = *room;
      const std::size_t pieces = share ? std::max<std::size_t>(1, to.size() / EnginePolicy::kParallelCopyBytes) : 1;
      const auto fill = [&](std::size_t i, int) {
        const std::size_t from = i * to.size() / pieces, end = (i + 1) * to.size() / pieces;
        runs.CopyOut(at + from, end - from, to.data() + from);
      };
      if (pieces > 1) {
        engine_->copiers->ParallelFor(pieces, fill);
      } else {
        fill(0, 0);
      }
      staging_.Filled(to.size());
      at += to.size();
      if (staging_.full()) {
        ScopedDevice on(lane_->device());
        if (absl::Status s = SubmitStaged(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  std::size_t element_size() const override { return elem_; }

  // Only once every element has come: before that (or after a failure)
  // Finish() reports what is wrong.
  absl::Status Seal() override {
    if (!failed_.ok() || !lease_ || consumed_ != plan_.array.length || passes_.passes.empty()) {
      return absl::OkStatus();
    }
    ScopedDevice on(lane_->device());
    return IssueEnd();
  }

  absl::StatusOr<AggregationResult> Finish() override {
    if (!failed_.ok()) return failed_;
    if (!lease_) return absl::FailedPreconditionError("cuda backend: Finish() called twice.");
    const ArraySpec& a = plan_.array;
    if (consumed_ != a.length) {
      return absl::InvalidArgumentError(absl::StrCat("data: received ", consumed_, " of the ",
                                                     a.length, " elements in spec.length."));
    }
    if (!a.segmented() && a.length == 0) {
      for (const OpSpec& op : plan_.ops) {
        if (rules::NeedsNonEmpty(op)) {
          return absl::InvalidArgumentError(
              absl::StrCat(rules::Name(op.kind), " of an empty array has no value."));
        }
      }
    }
    if (!passes_.passes.empty()) {
      ScopedDevice on(lane_->device());
      if (absl::Status s = IssueEnd(); !s.ok()) return s;
      const cudaStream_t compute = lane_->compute_stream().get();
      if (const cudaError_t err = Sync(compute); err != cudaSuccess) return Fail(err, "finishing");
      for (DeviceLane::Slot& s : lane_->slots()) {
        if (s.pending) {
          if (absl::Status st = Retire(s); !st.ok()) return st;
        }
      }
    }
    if (absl::Status s = CheckRowsHaveValues(plan_, passes_, lane_->result()); !s.ok()) return s;
    AggregationResult result = CollectResults(plan_, passes_, lane_->result());
    result.backend = "cuda";
    result.device = engine_->devices->DeviceName(lane_->device());
    {
      ScopedDevice on(lane_->device());
      Drain();
      ReportMetrics(/*device_memory=*/true);
    }
    lease_.Reset();
    return result;
  }

 private:
  // The element count of the next `bytes` bytes: a live reduction, whole
  // elements, within spec.length.
  absl::StatusOr<std::uint64_t> CheckNext(std::uint64_t bytes) const {
    if (!failed_.ok()) return failed_;
    if (!lease_) return absl::FailedPreconditionError("cuda backend: Consume() after Finish().");
    if (bytes % elem_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("data: ", bytes, " bytes is not a whole number of ",
                                                     rules::Name(plan_.array.dtype), " elements."));
    }
    if (bytes / elem_ > plan_.array.length - consumed_) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: more than the ", plan_.array.length, " elements in spec.length."));
    }
    return bytes / elem_;
  }

  // The array's last chunk and the finishing kernels, issued once (by
  // Seal() or Finish(), whichever comes first). The lane's device is set.
  absl::Status IssueEnd() {
    if (ended_) return absl::OkStatus();
    if (open_bytes_ > 0) {  // the array's last chunk, its copies issued
      if (absl::Status s = CloseDeviceChunk(); !s.ok()) return s;
    } else if (staging_.filled() > 0) {
      if (absl::Status s = SubmitStaged(); !s.ok()) return s;
    } else if (!launched_) {
      // An empty array still needs its state started (aggregate.h).
      if (absl::Status s = Launch(lane_->slot(0).chunk.data(), 0); !s.ok()) return s;
    }
    const cudaStream_t compute = lane_->compute_stream().get();
    for (const Pass& pass : passes_.passes) {
      const cudaError_t err = kernels::Finalize(pass.plan, lane_->state() + pass.state_offset,
                                                lane_->result() + pass.state_offset, compute);
      if (err != cudaSuccess) return Fail(err, "finalizing");
    }
    ended_ = true;
    return absl::OkStatus();
  }

  static cudaError_t Sync(cudaStream_t s) {
    TALLY_CUDA_TRY(cudaStreamSynchronize(s));
    return cudaSuccess;
  }

  // Host bytes, cut into chunks at fixed multiples of the chunk size (the
  // same cuts, so the same bits). Pinned bytes at a chunk boundary go into
  // the device's chunk buffer from where they lie, as ConsumeRuns' pinned
  // runs do, and so does anything after them in that chunk; everything else
  // is gathered into a staging block first. A shared-memory region is read
  // only by the copy engine that way, never by a CPU copy. The bytes of a
  // Consume() outlive the reduction (Reduction's contract), so nothing here
  // waits for its copies.
  absl::Status ConsumeHost(const std::byte* p, std::uint64_t n, bool pinned) {
    while (n > 0) {
      if (open_bytes_ > 0 || (pinned && staging_.filled() == 0)) {
        const Extent rest{std::span<const std::byte>(p, n * elem_),
                          pinned ? Placement::PinnedHost() : Placement::PageableHost()};
        absl::StatusOr<std::uint64_t> took = CopyInPlace(HostRuns({&rest, 1}), 0);
        if (!took.ok()) return took.status();
        p += *took;
        n -= *took / elem_;
        continue;
      }
      // A block is one chunk, a whole number of elements.
      absl::StatusOr<std::size_t> took = staging_.Fill(p, n * elem_);
      if (!took.ok()) return failed_ = took.status();
      if (staging_.filled() == *took) ReportPinned();  // a block was taken from the pool
      p += *took;
      n -= *took / elem_;
      if (staging_.full()) {
        // The device only for the copy and kernels: Consume() is called once
        // per receive slice, most of which only fill the pinned block.
        ScopedDevice on(lane_->device());
        if (absl::Status s = SubmitStaged(); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  absl::Status SubmitStaged() {
    std::size_t bytes = 0;
    PinnedPool::Block block = staging_.Take(&bytes);
    return SubmitChunk(block.data, bytes / elem_, block);
  }

  // Copies `elements` at host address `src` (pinned) to the next chunk
  // buffer and folds them in. `staged`, when set, is the pool block `src`
  // lies in; it goes back to the pool once the copy has read it.
  absl::Status SubmitChunk(const std::byte* src, std::uint64_t elements, PinnedPool::Block staged) {
    DeviceLane::Slot& s = lane_->slot(chunks_);
    if (s.pending) {
      if (absl::Status st = Retire(s); !st.ok()) {
        if (staged) pinned_->ReleaseNow(staged);
        return st;
      }
    }
    const std::size_t bytes = elements * elem_;
    const StreamView copy = lane_->copy_stream();
    const cudaError_t err = [&] {
      TALLY_CUDA_TRY(cudaEventRecord(s.copy_start.get(), copy.get()));
      TALLY_CUDA_TRY(cudaMemcpyAsync(s.chunk.data(), src, bytes, cudaMemcpyHostToDevice, copy.get()));
      TALLY_CUDA_TRY(cudaEventRecord(s.copy_done.get(), copy.get()));
      return cudaSuccess;
    }();
    absl::Status released;
    if (staged) {
      released = pinned_->Release(staged, copy);
      ReportPinned();
    }
    if (err != cudaSuccess) return Fail(err, "copying a chunk to the device");
    if (!released.ok()) {
      spdlog::error("cuda backend: request on {} failed: {}",
                    engine_->devices->DeviceName(lane_->device()), released.ToString());
      return failed_ = released;
    }
    s.pending = true;  // from here the slot's events are recorded
    s.bytes = bytes;
    return LaunchAfterCopy(s, elements);
  }


  // Bytes of `runs` from `at` up to the next chunk boundary (or their end)
  // copied into the device chunk being filled, which is folded in once full
  // or once the array ends; how many bytes that took.
  absl::StatusOr<std::uint64_t> CopyInPlace(const HostRuns& runs, std::uint64_t at) {
    const std::uint64_t block = pinned_->block_bytes();
    const std::uint64_t take = std::min<std::uint64_t>(block - open_bytes_, runs.size() - at);
    ScopedDevice on(lane_->device());
    if (absl::Status s = AppendToDeviceChunk(runs, at, take); !s.ok()) return s;
    const bool array_ends = at + take == runs.size() && consumed_ == plan_.array.length;  // consumed_ counts these
    if (open_bytes_ == block || array_ends) {
      if (absl::Status s = CloseDeviceChunk(); !s.ok()) return s;
    }
    return take;
  }

  // Bytes [at, at + bytes) of `runs` copied into the device chunk being
  // filled (opened first if none is), each run's part from where it lies:
  // pinned parts read by the copy engine as they are, pageable ones (a
  // slice outside the receive arena) staged by the driver. The caller waits
  // for the copies (WaitForCopies) before the runs go.
  absl::Status AppendToDeviceChunk(const HostRuns& runs, std::uint64_t at, std::uint64_t bytes) {
    DeviceLane::Slot& s = lane_->slot(chunks_);
    const cudaStream_t copy = lane_->copy_stream().get();
    if (open_bytes_ == 0) {
      if (s.pending) {
        if (absl::Status st = Retire(s); !st.ok()) return st;
      }
      if (const cudaError_t e = cudaEventRecord(s.copy_start.get(), copy); e != cudaSuccess) {
        Record(e, "cudaEventRecord(copy_start)", __FILE__, __LINE__);
        return Fail(e, "opening a chunk");
      }
    }
    cudaError_t err = cudaSuccess;
    std::uint64_t offset = at;
    runs.ForEachPart(at, bytes, [&](std::span<const std::byte> part) {
      if (err != cudaSuccess) return;
      err = cudaMemcpyAsync(s.chunk.data() + open_bytes_, part.data(), part.size(), cudaMemcpyHostToDevice, copy);
      if (err != cudaSuccess) {
        Record(err, "cudaMemcpyAsync(received slice)", __FILE__, __LINE__);
        return;
      }
      if (runs.Pinned(offset, part.size())) direct_bytes_ += part.size();
      offset += part.size();
      open_bytes_ += part.size();
    });
    if (err != cudaSuccess) return Fail(err, "copying received slices to the device");
    return absl::OkStatus();
  }

  // Folds in the device chunk being filled, once its copies are done.
  absl::Status CloseDeviceChunk() {
    DeviceLane::Slot& s = lane_->slot(chunks_);
    const std::size_t bytes = std::exchange(open_bytes_, 0);
    if (const cudaError_t e = cudaEventRecord(s.copy_done.get(), lane_->copy_stream().get()); e != cudaSuccess) {
      Record(e, "cudaEventRecord(copy_done)", __FILE__, __LINE__);
      return Fail(e, "closing a chunk");
    }
    s.pending = true;  // from here the slot's events are recorded
    s.bytes = bytes;
    return LaunchAfterCopy(s, bytes / elem_);
  }

  // Waits until every copy issued so far has read its source; a failure
  // fails the request.
  void WaitForCopies() {
    ScopedDevice on(lane_->device());
    if (const cudaError_t err = cudaStreamSynchronize(lane_->copy_stream().get()); err != cudaSuccess) {
      Record(err, "cudaStreamSynchronize(copy stream)", __FILE__, __LINE__);
      (void)Fail(err, "waiting for copies from received slices");
    }
  }

  // The kernels over slot `s`'s chunk buffer, `elements` long, ordered
  // after its copy (s.copy_done recorded).
  absl::Status LaunchAfterCopy(DeviceLane::Slot& s, std::uint64_t elements) {
    const cudaError_t wait = [&] {
      TALLY_CUDA_TRY(cudaStreamWaitEvent(lane_->compute_stream().get(), s.copy_done.get(), 0));
      TALLY_CUDA_TRY(cudaEventRecord(s.kernel_start.get(), lane_->compute_stream().get()));
      return cudaSuccess;
    }();
    if (wait != cudaSuccess) return Fail(wait, "ordering a chunk's kernels after its copy");
    if (absl::Status st = Launch(s.chunk.data(), elements); !st.ok()) return st;
    if (const cudaError_t e = cudaEventRecord(s.kernel_done.get(), lane_->compute_stream().get());
        e != cudaSuccess) {
      Record(e, "cudaEventRecord(kernel_done)", __FILE__, __LINE__);
      return Fail(e, "recording a chunk's end");
    }
    ++chunks_;
    return absl::OkStatus();
  }

  // Device bytes on the lane's GPU: every pass over them where they lie, in
  // cuts of device_cut_ elements, timed as one slot's kernels.
  absl::Status ReduceInPlace(const std::byte* d, std::uint64_t n) {
    ScopedDevice on(lane_->device());
    DeviceLane::Slot& s = lane_->slot(chunks_);
    if (s.pending) {
      if (absl::Status st = Retire(s); !st.ok()) return st;
    }
    const cudaStream_t compute = lane_->compute_stream().get();
    if (const cudaError_t e = cudaEventRecord(s.kernel_start.get(), compute); e != cudaSuccess) {
      Record(e, "cudaEventRecord(kernel_start)", __FILE__, __LINE__);
      return Fail(e, "recording a reduction's start");
    }
    s.pending = true;
    s.bytes = 0;  // nothing copied
    while (n > 0) {
      const std::uint64_t cut = std::min(n, device_cut_);
      if (absl::Status st = Launch(d, cut); !st.ok()) return st;
      d += cut * elem_;
      n -= cut;
    }
    if (const cudaError_t e = cudaEventRecord(s.kernel_done.get(), compute); e != cudaSuccess) {
      Record(e, "cudaEventRecord(kernel_done)", __FILE__, __LINE__);
      return Fail(e, "recording a reduction's end");
    }
    ++chunks_;
    return absl::OkStatus();
  }

  // Every pass over `elements` at `d_data` on the device, the array's next
  // elements.
  absl::Status Launch(const void* d_data, std::uint64_t elements) {
    if (!launched_ && passes_.mask_bytes > 0) {
      // The mask goes into the lane's state once, ahead of the first
      // chunk on the same stream; every pass reads it from there.
      std::byte* words = lane_->state() + passes_.mask_offset;
      const cudaError_t err = cudaMemcpyAsync(words, plan_.array.validity->data(), passes_.mask_bytes,
                                              cudaMemcpyHostToDevice, lane_->compute_stream().get());
      if (err != cudaSuccess) return Fail(err, "copying the validity mask");
    }
    for (const Pass& pass : passes_.passes) {
      const cudaError_t err = kernels::Accumulate(
          pass.plan, d_data, elements, offset_, lane_->state() + pass.state_offset,
          lane_->scratch(), lane_->scratch_bytes(), lane_->compute_stream().get());
      if (err != cudaSuccess) return Fail(err, "accumulating a chunk");
    }
    offset_ += elements;
    launched_ = true;
    return absl::OkStatus();
  }

  // Waits for a slot's kernels (and so its copy) and books their times.
  absl::Status Retire(DeviceLane::Slot& s) {
    if (const cudaError_t err = cudaEventSynchronize(s.kernel_done.get()); err != cudaSuccess) {
      Record(err, "cudaEventSynchronize(kernel_done)", __FILE__, __LINE__);
      return Fail(err, "reducing a chunk");
    }
    s.pending = false;
    if (s.bytes > 0) {
      h2d_bytes_ += s.bytes;
      h2d_seconds_ += ElapsedSeconds(s.copy_start, s.copy_done);
    }
    kernel_seconds_ += ElapsedSeconds(s.kernel_start, s.kernel_done);
    return absl::OkStatus();
  }

  // Leaves the lane idle for the next request: its streams drained.
  void Drain() {
    for (DeviceLane::Slot& s : lane_->slots()) {
      if (s.pending && failed_.ok()) (void)Retire(s);
    }
    if (const cudaError_t err = lane_->Synchronize(); err != cudaSuccess) {
      (void)Fail(err, "draining the lane");
    }
  }

  // Fails the request with INTERNAL and the CUDA call that failed; a sticky
  // error also marks the device lost.
  absl::Status Fail(cudaError_t err, const char* what) {
    if (!failed_.ok()) return failed_;
    failed_ = LaneFailure(engine_, lane_, err, what);
    return failed_;
  }

  void ReportPinned() const {
    if (Metrics* m = engine_->metrics.load(std::memory_order_acquire)) {
      m->SetPinnedPool(engine_->devices->pinned_total(), engine_->devices->pinned_used());
    }
  }

  void ReportMetrics(bool device_memory) {
    Metrics* m = engine_->metrics.load(std::memory_order_acquire);
    if (m == nullptr) return;
    const int dev = lane_->device();
    if (h2d_bytes_ > 0) m->HostToDevice(dev, h2d_bytes_, h2d_seconds_);
    if (direct_bytes_ > 0) m->HostToDeviceDirect(dev, direct_bytes_);
    direct_bytes_ = 0;
    if (kernel_seconds_ > 0.0) m->KernelTime(dev, kernel_seconds_);
    h2d_bytes_ = 0;
    h2d_seconds_ = kernel_seconds_ = 0.0;
    ReportPinned();
    if (!device_memory || dev < 0 || dev >= EngineContext::kTrackedDevices) return;
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count();
    std::atomic<std::int64_t>& last = engine_->memory_reported_ns[static_cast<std::size_t>(dev)];
    std::int64_t seen = last.load(std::memory_order_relaxed);
    if (now - seen < EngineContext::kMemoryReportIntervalNs ||
        !last.compare_exchange_strong(seen, now, std::memory_order_relaxed)) {
      return;  // reported lately, or another request is reporting now
    }
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      m->SetDeviceMemory(dev, engine_->devices->Model(dev), total - free, total);
    }
  }

  const AggregationPlan plan_;
  const PassPlan passes_;
  EngineContext* const engine_;
  DevicePool::Lease lease_;
  DeviceLane* const lane_;
  PinnedPool* const pinned_;
  StagingBlock staging_;  // the chunk being gathered from pageable bytes
  std::size_t open_bytes_ = 0;  // copied so far into the device chunk being filled in place
  const std::size_t elem_;

  const std::uint64_t device_cut_;  // elements per launch over device bytes

  std::uint64_t consumed_ = 0;  // elements received
  std::uint64_t offset_ = 0;    // elements handed to the kernels
  std::uint64_t chunks_ = 0;    // slots used so far (the next is slot(chunks_))
  bool launched_ = false;       // the state has been started
  bool ended_ = false;          // the last chunk and the finishing kernels issued (IssueEnd)
  absl::Status failed_;

  // Not yet reported to Metrics.
  std::uint64_t h2d_bytes_ = 0;
  std::uint64_t direct_bytes_ = 0;  // of h2d_bytes_, copied from where they were received
  double h2d_seconds_ = 0.0;
  double kernel_seconds_ = 0.0;
};

}  // namespace

absl::Status LaneFailure(EngineContext* engine, DeviceLane* lane, cudaError_t err, const char* what) {
  const std::string where = LastErrorWhere();
  (void)cudaGetLastError();  // clears an error that is not sticky
  const cudaError_t probe = cudaStreamQuery(lane->compute_stream().get());
  const bool sticky = IsSticky(err) || (probe != cudaSuccess && probe != cudaErrorNotReady);
  const std::string& device = engine->devices->DeviceName(lane->device());
  spdlog::error("cuda backend: request on {} lane {} failed {}: {}{}", device, lane->index(), what, where,
                sticky ? " (sticky: the device is lost)" : "");
  if (sticky) engine->devices->MarkLost(lane->device(), where);
  return absl::InternalError(absl::StrCat("CUDA error on ", device, " while ", what, ": ", where));
}

PassPlan PlanPasses(const AggregationPlan& plan, bool exact_sums) {
  PassPlan out;
  kernels::AggregatePlan base;
  base.exact_sums = exact_sums;
  base.dtype = plan.array.dtype;
  base.length = plan.array.length;
  base.row_length = plan.array.row_length;
  const bool masked = plan.array.masked();
  rules::OpMask fused = 0;
  for (const OpSpec& op : plan.ops) fused |= MaskOf(op.kind, plan.array.dtype, masked);

  // Pass 0: the fused ops, with the first histogram if there is one.
  out.op_pass.assign(plan.ops.size(), -1);
  bool first_histogram = true;
  if (fused != 0) {
    Pass p;
    p.plan = base;
    p.plan.ops = fused;
    out.passes.push_back(p);
  }
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const OpSpec& op = plan.ops[i];
    if (op.kind == OpKind::kCount && !masked) continue;
    if (op.kind != OpKind::kHistogram) {
      out.op_pass[i] = 0;
      continue;
    }
    if (first_histogram && fused != 0) {
      out.passes[0].plan.ops |= Bit(OpKind::kHistogram);
      out.passes[0].plan.histogram = op.histogram;
      out.op_pass[i] = 0;
    } else {
      Pass p;
      p.plan = base;
      p.plan.ops = Bit(OpKind::kHistogram);
      p.plan.histogram = op.histogram;
      out.op_pass[i] = static_cast<int>(out.passes.size());
      out.passes.push_back(p);
    }
    first_histogram = false;
  }
  if (masked) {
    // The kernel a pass runs, and so its scratch (ScratchNeeded, before a
    // lane is leased) and its state's layout (a count of valid elements;
    // the exact pass's), depends on whether it reads a mask: the passes
    // point at a placeholder until ReadingMaskFrom() gives them the lane's
    // copy.
    static constexpr std::uint32_t kMaskPlaceholder = 0;
    for (Pass& p : out.passes) p.plan.validity = &kMaskPlaceholder;
  }
  for (Pass& p : out.passes) {
    p.layout = kernels::LayoutOf(p.plan);
    p.state_offset = out.state_bytes;
    out.state_bytes += (p.layout.bytes + 255) / 256 * 256;
  }
  if (masked) {
    out.mask_offset = out.state_bytes;
    out.mask_bytes = plan.array.validity->size() * sizeof(std::uint32_t);
    out.state_bytes += (out.mask_bytes + 255) / 256 * 256;
  }
  return out;
}

cudaError_t ScratchNeeded(const PassPlan& passes, std::uint64_t chunk_elements,
                          std::size_t* bytes) {
  *bytes = 0;
  for (const Pass& p : passes.passes) {
    std::size_t b = 0;
    TALLY_CUDA_TRY(kernels::ScratchBytes(p.plan, chunk_elements, &b));
    *bytes = std::max(*bytes, b);
  }
  return cudaSuccess;
}

std::unique_ptr<Reduction> MakeCudaReduction(const AggregationPlan& plan, PassPlan passes,
                                             DevicePool::Lease lease, EngineContext* engine,
                                             std::uint64_t device_cut) {
  return std::make_unique<CudaReduction>(plan, std::move(passes), std::move(lease), engine,
                                         device_cut);
}

}  // namespace tally::cuda
