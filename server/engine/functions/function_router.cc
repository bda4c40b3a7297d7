#include "server/engine/functions/function_router.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/validate.h"
#include "server/engine/forwarding_backend.h"
#include "server/engine/functions/holistic_budget.h"
#include "server/engine/functions/state_reduction.h"
#include "tally/rules/agg/registry.h"

namespace tally {
namespace {

bool KeptByRegistry(const OpSpec& op) { return rules::agg::Of(op.kind).state != nullptr; }

// The plan's fused part and its state functions, answered in plan order.
class SplitReduction final : public Reduction {
 public:
  SplitReduction(std::unique_ptr<Reduction> fused, std::vector<std::size_t> fused_ops,
                 std::unique_ptr<Reduction> kept, std::vector<std::size_t> kept_ops, std::size_t ops,
                 std::size_t element_size)
      : fused_(std::move(fused)),
        fused_ops_(std::move(fused_ops)),
        kept_(std::move(kept)),
        kept_ops_(std::move(kept_ops)),
        ops_(ops),
        element_size_(element_size) {}

  std::size_t element_size() const override { return element_size_; }

  absl::Status Consume(const Extent& elements) override {
    if (fused_) {
      if (absl::Status s = fused_->Consume(elements); !s.ok()) return s;
    }
    return kept_->Consume(elements);
  }

  absl::Status ConsumeRuns(const HostRuns& runs) override {
    if (fused_) {
      if (absl::Status s = fused_->ConsumeRuns(runs); !s.ok()) return s;
    }
    return kept_->ConsumeRuns(runs);
  }

  absl::Status Seal() override {
    if (fused_) {
      if (absl::Status s = fused_->Seal(); !s.ok()) return s;
    }
    return kept_->Seal();
  }

  absl::StatusOr<AggregationResult> Finish() override {
    AggregationResult result;
    result.values.resize(ops_);
    if (fused_) {
      absl::StatusOr<AggregationResult> f = fused_->Finish();
      if (!f.ok()) return f.status();
      for (std::size_t j = 0; j < fused_ops_.size(); ++j) result.values[fused_ops_[j]] = std::move(f->values[j]);
      result.backend = std::move(f->backend);
      result.device = std::move(f->device);
    }
    absl::StatusOr<AggregationResult> k = kept_->Finish();
    if (!k.ok()) return k.status();
    for (std::size_t j = 0; j < kept_ops_.size(); ++j) result.values[kept_ops_[j]] = std::move(k->values[j]);
    if (!fused_) {  // the kept functions' own pass says where it ran
      result.backend = std::move(k->backend);
      result.device = std::move(k->device);
    }
    return result;
  }

 private:
  std::unique_ptr<Reduction> fused_;  // null when every op is kept
  std::vector<std::size_t> fused_ops_;
  std::unique_ptr<Reduction> kept_;
  std::vector<std::size_t> kept_ops_;
  std::size_t ops_;
  std::size_t element_size_;
};

// Everything but starting a reduction goes to the backend below.
class FunctionRouter final : public ForwardingBackend {
 public:
  FunctionRouter(std::unique_ptr<Backend> inner, std::uint64_t max_holistic_bytes)
      : ForwardingBackend(std::move(inner)), budget_(max_holistic_bytes) {}

  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    return Route(plan, from, false);
  }
  // The fused part waits as Start waits: the wait is the router's to bound
  // (cost routing), below this layer.
  absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan, const Placement& from,
                                                         std::chrono::milliseconds wait) override {
    (void)wait;
    return Route(plan, from, false);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartIfFree(const AggregationPlan& plan,
                                                         const Placement& from) override {
    return Route(plan, from, true);
  }
  // The functions' states run on the host for bytes anywhere (copied from
  // a GPU where they lie there); the rest is the backend's to run.
  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    AggregationPlan fused;
    fused.array = plan.array;
    for (const OpSpec& op : plan.ops) {
      if (!KeptByRegistry(op)) fused.ops.push_back(op);
    }
    if (fused.ops.empty()) return absl::OkStatus();
    return to().Runs(fused, from);
  }

 private:
  absl::StatusOr<std::unique_ptr<Reduction>> Route(const AggregationPlan& plan, const Placement& from,
                                                   bool if_free) {
    std::vector<std::size_t> kept, fused;
    for (std::size_t i = 0; i < plan.ops.size(); ++i) (KeptByRegistry(plan.ops[i]) ? kept : fused).push_back(i);
    if (kept.empty()) return if_free ? to().StartIfFree(plan, from) : to().Start(plan, from);
    // A backend driven directly (tests, benchmarks) must not be trusted to
    // have validated; the inner backend checks the fused part again.
    if (absl::Status s = ValidatePlan(plan, RequestLimits{}); !s.ok()) return s;
    std::unique_ptr<Reduction> fused_reduction;
    if (!fused.empty()) {
      AggregationPlan part;
      part.array = plan.array;
      for (const std::size_t i : fused) {
        part.ops.push_back(plan.ops[i]);
        if (i < plan.asked.size()) part.asked.push_back(plan.asked[i]);
      }
      if (part.asked.size() == part.ops.size()) part.asked.clear();
      absl::StatusOr<std::unique_ptr<Reduction>> r = if_free ? to().StartIfFree(part, from) : to().Start(part, from);
      if (!r.ok()) return r.status();
      fused_reduction = std::move(*r);
    }
    std::unique_ptr<Reduction> kept_reduction;
    if (!from.host()) {
      // Device bytes: the backend's own pass where it has one for these
      // functions, else the host reads them through copies.
      AggregationPlan part;
      part.array = plan.array;
      bool partial = false;
      for (const std::size_t i : kept) {
        part.ops.push_back(plan.ops[i]);
        partial = partial || plan.ops[i].partial;
      }
      if (!partial) {
        absl::StatusOr<std::unique_ptr<Reduction>> on_device = to().StartKeptOnDevice(part, from);
        if (on_device.ok()) {
          kept_reduction = std::move(*on_device);
        } else if (!absl::IsUnimplemented(on_device.status())) {
          return on_device.status();
        }
      }
    }
    if (!kept_reduction) {
      tally::CopyToHost copy;
      if (!from.host()) {
        copy = [backend = &to()](const Extent& e, std::span<std::byte> to) { return backend->CopyToHost(e, to); };
      }
      kept_reduction = MakeStateReduction(plan, kept, &budget_, std::move(copy));
    }
    return std::unique_ptr<Reduction>(std::make_unique<SplitReduction>(
        std::move(fused_reduction), std::move(fused), std::move(kept_reduction), std::move(kept), plan.ops.size(),
        rules::SizeOf(plan.array.dtype)));
  }

  HolisticBudget budget_;
};

}  // namespace

std::unique_ptr<Backend> MakeFunctionRouter(std::unique_ptr<Backend> inner, std::uint64_t max_holistic_bytes) {
  return std::make_unique<FunctionRouter>(std::move(inner), max_holistic_bytes);
}

}  // namespace tally
