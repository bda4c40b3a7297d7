// The narrow interface between the front end and whatever computes: a
// Backend starts Reductions, a Reduction takes the array's bytes in order, as
// Extents that say where they lie (server/engine/source.h), and produces the
// results; a Backend also holds resident arrays (server/engine/resident.h).
// The CPU, CUDA and null backends implement it; tests and benchmarks drive
// it directly, with no network in between.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/core/request.h"
#include "server/engine/attachment.h"
#include "server/engine/device_grouping.h"
#include "server/engine/element_aligner.h"
#include "server/engine/host_runs.h"
#include "server/engine/resident.h"
#include "server/engine/source.h"

namespace tally {

namespace cpu {
class ThreadPool;
}

class Metrics;

// One request in progress.
//
// Consume() receives the array's elements in order, in pieces of any number
// of whole elements (the front end re-blocks byte chunks that split an
// element), each where the Start() placement said they would be. It is
// called from one thread at a time, but not always the same thread. Finish()
// is called once, after the last Consume(), and only if every Consume()
// succeeded. The result must not depend on how host bytes were split into
// pieces: the same request from the same kind of memory gives bitwise the
// same answer every time (docs/architecture.md says where device memory
// differs).
class Reduction {
 public:
  virtual ~Reduction() = default;
  [[nodiscard]] virtual absl::Status Consume(const Extent& elements) = 0;
  // Bytes in ordinary host memory: what arrives over the network.
  [[nodiscard]] absl::Status Consume(std::span<const std::byte> elements) {
    return Consume(Extent::PageableHost(elements));
  }
  // The array's next bytes as several runs of host memory, all present at
  // once (the receive slices of one message): together a whole number of
  // elements, though a run may end inside one. A backend that can read them
  // in parallel overrides this, with the same results as Consume() of the
  // same bytes; this default hands them to Consume() in order.
  [[nodiscard]] virtual absl::Status ConsumeRuns(const HostRuns& runs) {
    return ConsumeInOrder(runs, 0, runs.size());
  }
  // The size of one element of the array (the plan's dtype).
  virtual std::size_t element_size() const = 0;
  // Issues the work that ends the reduction (its last chunk, the finishing
  // kernels) without waiting for it. A caller finishing reductions on
  // several devices seals them all before it finishes the first, so the
  // devices' last steps overlap instead of following one another; Finish()
  // then only waits. Optional: Finish() issues whatever Seal() did not, and
  // reports any error. The default has nothing to issue early.
  [[nodiscard]] virtual absl::Status Seal() { return absl::OkStatus(); }
  [[nodiscard]] virtual absl::StatusOr<AggregationResult> Finish() = 0;

 protected:
  // `bytes` of `runs` from byte `byte` through Consume(), one run's part at
  // a time, re-blocked into whole elements. Always as pageable host memory:
  // an element cut by a run boundary is handed over from the aligner's own
  // buffer, and runs passed here are valid only during the call.
  [[nodiscard]] absl::Status ConsumeInOrder(const HostRuns& runs, std::uint64_t byte, std::uint64_t bytes) {
    ElementAligner aligner(element_size());
    absl::Status status;
    runs.ForEachPart(byte, bytes, [&](std::span<const std::byte> part) {
      if (!status.ok()) return;
      status = aligner.Push(part, [&](std::span<const std::byte> elements) {
        return Consume(Extent::PageableHost(elements));
      });
    });
    if (status.ok() && aligner.carried() != 0) {
      status = absl::InvalidArgumentError("data: the bytes end inside an element.");
    }
    return status;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda", "null": the name reported in responses and metrics.
  virtual std::string name() const = 0;
  // Human-readable description of the hardware, e.g. the CPU model.
  virtual std::string device() const = 0;
  // `plan` has been validated (see server/core/validate.h); its bytes will
  // come from `from` (a backend that cannot read there says so with
  // FAILED_PRECONDITION). A Reduction that is destroyed without Finish()
  // (cancelled, failed) releases what it holds.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan,
                                                                         const Placement& from) = 0;
  // What this backend runs: OK when it runs `plan` over bytes in `from`,
  // else UNIMPLEMENTED with a sentence naming what it does not (an op, a
  // layout, where the bytes lie, a size). Start refuses the same plans.
  // The router (server/engine/routing/router.h) asks it to choose between
  // the cpu and a GPU backend; no backend decides for another.
  [[nodiscard]] virtual absl::Status Runs(const AggregationPlan& plan, const Placement& from) const {
    (void)plan;
    (void)from;
    return absl::OkStatus();
  }
  // Start(), waiting at most `wait` for the hardware it runs on (a GPU
  // lane): RESOURCE_EXHAUSTED past it. Backends without lanes start as
  // Start() does.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan,
                                                                               const Placement& from,
                                                                               std::chrono::milliseconds wait) {
    (void)wait;
    return Start(plan, from);
  }
  // Start(), but without waiting for a GPU lane: RESOURCE_EXHAUSTED at once
  // when every lane that could read device bytes `from` is busy. A query of
  // several GPUs' pieces starts what it can this way while it holds lanes,
  // and waits (with Start) only when it holds none. Host bytes start as
  // Start() does.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Reduction>> StartIfFree(const AggregationPlan& plan,
                                                                               const Placement& from) {
    if (from.host()) return Start(plan, from);
    return StartWithin(plan, from, std::chrono::milliseconds(0));
  }
  // Bytes that arrive over the network.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan) {
    return Start(plan, Placement::PageableHost());
  }

  // Where this backend keeps resident arrays, each place with its own
  // budget. Empty: it keeps none.
  virtual std::vector<ResidentPlace> ResidentPlaces() const { return {}; }
  // Memory for a resident array of `bytes` in place `place` (an index into
  // ResidentPlaces()). RESOURCE_EXHAUSTED when the memory is not there.
  // Allocates: called on the upload path, never on the query path.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(
      std::uint64_t bytes, int place) {
    (void)bytes;
    (void)place;
    return absl::FailedPreconditionError(name() + " backend keeps no resident datasets.");
  }

  // Host memory a client shares (a mapped shared-memory file), made
  // readable once for many requests. The cuda backend registers it with
  // CUDA and reads it as pinned host memory; by default it is read in
  // place. Must not touch the bytes' contents: the client owns them.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Attachment>> AttachHost(
      std::span<const std::byte> bytes) {
    return std::make_unique<PlainHostAttachment>(bytes);
  }
  // The first `bytes` of GPU memory another process exported with
  // cudaIpcGetMemHandle (`handle`: the handle's bytes) on GPU `device`.
  // INVALID_ARGUMENT for a malformed handle or a size over the allocation.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Attachment>> AttachCudaIpc(
      std::span<const std::byte> handle, int device, std::uint64_t bytes) {
    (void)handle;
    (void)device;
    (void)bytes;
    return absl::FailedPreconditionError(
        name() + " backend cannot read GPU memory: register a host shared-memory region instead.");
  }

  // The functions whose state the registry keeps (quantiles, top-k,
  // sketches: server/engine/functions) over device bytes, computed on the
  // device: `plan` holds only such functions, none asking for its partial
  // state, and the reduction answers them (RowAnswers) in plan order.
  // UNIMPLEMENTED where this backend has no pass for them there: the router
  // then reads the bytes on the host (CopyToHost).
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Reduction>> StartKeptOnDevice(const AggregationPlan& plan,
                                                                                    const Placement& from) {
    (void)plan;
    return absl::UnimplementedError(absl::StrCat(name(), " backend has no device pass for ", from.Describe(), "."));
  }

  // Group-by on the device (device_grouping.h): the `rows` keys of `dtype`
  // at `keys` (device bytes) ordered by key, ascending, each key's rows in
  // table order; float keys as pandas groups them (-0.0 as 0.0, the NaN
  // rows one group, the last: DeviceGroupOrder::nan_group). UNIMPLEMENTED
  // where this backend has no such pass: the engine groups on the host. More than
  // `max_groups` groups is RESOURCE_EXHAUSTED naming --max_groups.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(
      const Extent& keys, DType dtype, std::uint64_t rows, std::uint64_t max_groups) {
    (void)keys;
    (void)dtype;
    (void)rows;
    (void)max_groups;
    return absl::UnimplementedError(absl::StrCat(name(), " backend does not group on a device."));
  }

  // Group-by's direct path on the device: per key of the `rows` keys at
  // `keys`, what sums, counts, extremes and means of the float values at
  // `values` need (device_grouping.h), in one read, of which `arrays` come
  // back (KeyedArrays says what always does). UNIMPLEMENTED where the
  // backend has none, or for these keys and values (dtype, a key range too
  // wide): the engine orders the rows instead (OrderByKeyOnDevice).
  [[nodiscard]] virtual absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype,
                                                                   const Extent& values, DType dtype,
                                                                   std::uint64_t rows, std::uint64_t max_groups,
                                                                   DirectFacts facts, KeyedArrays arrays) {
    (void)facts;
    (void)arrays;
    (void)keys;
    (void)key_dtype;
    (void)values;
    (void)dtype;
    (void)rows;
    (void)max_groups;
    return absl::UnimplementedError(absl::StrCat(name(), " backend does not sum by key on a device."));
  }

  // Several key columns of `rows` keys each (device bytes on one device,
  // integer or bool dtypes) combined into one key column there
  // (device_grouping.h), which OrderByKeyOnDevice and SumByKeyOnDevice
  // then group. UNIMPLEMENTED where the backend has no such pass, or for
  // these keys (a dtype, the columns on several devices, ranges whose
  // product passes 2^32): the engine groups on the host.
  [[nodiscard]] virtual absl::StatusOr<CombinedKeyColumn> CombineKeysOnDevice(std::span<const Extent> keys,
                                                                              std::span<const DType> dtypes,
                                                                              std::uint64_t rows) {
    (void)keys;
    (void)dtypes;
    (void)rows;
    return absl::UnimplementedError(absl::StrCat(name(), " backend does not combine keys on a device."));
  }

  // Group-by on the device: the `rows` integer keys of `dtype` at `keys`
  // (device bytes) numbered by group (device_grouping.h), where they
  // spread too wide for the direct pass or a short sort and hold at most
  // `max_groups` distinct values. UNIMPLEMENTED otherwise: the engine
  // orders the rows by key instead (OrderByKeyOnDevice).
  [[nodiscard]] virtual absl::StatusOr<NumberedKeyColumn> NumberKeysOnDevice(const Extent& keys, DType dtype,
                                                                             std::uint64_t rows,
                                                                             std::uint64_t max_groups) {
    (void)keys;
    (void)dtype;
    (void)rows;
    (void)max_groups;
    return absl::UnimplementedError(absl::StrCat(name(), " backend does not number keys on a device."));
  }

  // The host columns of a `rows`-row group-by table copied into the memory
  // of one device this backend groups on, each owned by its DeviceColumn,
  // so that a table that arrived in host memory takes the device's steps
  // (OrderByKeyOnDevice, SumByKeyOnDevice). UNIMPLEMENTED where the backend
  // has no device or the table is too small to gain; any failure leaves
  // the table to the host's steps.
  [[nodiscard]] virtual absl::StatusOr<std::vector<std::unique_ptr<DeviceColumn>>> CopyToDevice(
      std::span<const std::span<const std::byte>> columns, std::uint64_t rows) {
    (void)columns;
    (void)rows;
    return absl::UnimplementedError(absl::StrCat(name(), " backend does not group on a device."));
  }

  // Copies device bytes (`from`, in a place this backend reads) into host
  // memory of the same size, for the functions that run on the host
  // (server/engine/functions). Backends without device memory refuse.
  [[nodiscard]] virtual absl::Status CopyToHost(const Extent& from, std::span<std::byte> to) {
    (void)to;
    return absl::FailedPreconditionError(absl::StrCat(name(), " backend cannot read ", from.placement.Describe(), "."));
  }

  // The host threads that engine steps running on the host beside this
  // backend share (group-by's direct pass on the host): the cpu backend's
  // pool, so that concurrent requests hold a bounded number of threads and
  // of per-thread buffers. nullptr: such steps run on the caller's thread.
  virtual cpu::ThreadPool* HostWorkers() { return nullptr; }

  // OK while the backend can serve; otherwise why not (e.g. every GPU was
  // lost). The server polls it and reports NOT_SERVING on the health service.
  virtual absl::Status Health() const { return absl::OkStatus(); }

  // Each device's own health, named by its resident place ("cuda:1"): OK, or
  // why no new request goes to it. A server with two GPUs that loses one
  // keeps serving on the other; the server reports each device under its
  // place on the health service and in tally_device_serving. Empty for
  // backends without devices.
  struct DeviceHealth {
    std::string place;
    absl::Status status;
  };
  virtual std::vector<DeviceHealth> DevicesHealth() const { return {}; }

  // Where to report engine metrics (copy and kernel time, pinned pool,
  // device memory); called once, before the first Start(). May stay unset.
  virtual void SetMetrics(Metrics* metrics) { (void)metrics; }
};

}  // namespace tally
