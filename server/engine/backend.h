// The narrow interface between the front end and whatever computes: a
// Backend starts Reductions, a Reduction takes the array's bytes in order and
// produces the results. The CPU, CUDA and null backends implement it; tests
// and benchmarks drive it directly, with no network in between.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/request.h"

namespace tally {

class Metrics;

// One request in progress.
//
// Consume() receives the array's elements in order, in pieces of any number
// of whole elements (the front end re-blocks byte chunks that split an
// element). It is called from one thread at a time, but not always the same
// thread. Finish() is called once, after the last Consume(), and only if every
// Consume() succeeded. The result must not depend on how the array was split
// into pieces: the same request gives bitwise the same answer every time.
class Reduction {
 public:
  virtual ~Reduction() = default;
  [[nodiscard]] virtual absl::Status Consume(std::span<const std::byte> elements) = 0;
  [[nodiscard]] virtual absl::StatusOr<AggregationResult> Finish() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda", "null": the name reported in responses and metrics.
  virtual std::string name() const = 0;
  // Human-readable description of the hardware, e.g. the CPU model.
  virtual std::string device() const = 0;
  // `plan` has been validated (see server/core/validate.h). A Reduction
  // that is destroyed without Finish() (cancelled, failed) releases what it
  // holds.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Reduction>> Start(
      const AggregationPlan& plan) = 0;

  // OK while the backend can serve; otherwise why not (e.g. a GPU was lost).
  // The server polls it and reports NOT_SERVING on the health service.
  virtual absl::Status Health() const { return absl::OkStatus(); }

  // Where to report engine metrics (copy and kernel time, pinned pool,
  // device memory); called once, before the first Start(). May stay unset.
  virtual void SetMetrics(Metrics* metrics) { (void)metrics; }
};

}  // namespace tally
