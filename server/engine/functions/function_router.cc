#include "server/engine/functions/function_router.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/validate.h"
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

class FunctionRouter final : public Backend {
 public:
  FunctionRouter(std::unique_ptr<Backend> inner, std::uint64_t max_holistic_bytes)
      : inner_(std::move(inner)), budget_(max_holistic_bytes) {}

  std::string name() const override { return inner_->name(); }
  std::string device() const override { return inner_->device(); }

  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    return Route(plan, from, false);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartIfFree(const AggregationPlan& plan,
                                                         const Placement& from) override {
    return Route(plan, from, true);
  }

  std::vector<ResidentPlace> ResidentPlaces() const override { return inner_->ResidentPlaces(); }
  cpu::ThreadPool* HostWorkers() override { return inner_->HostWorkers(); }
  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(std::uint64_t bytes, int place) override {
    return inner_->AllocateResident(bytes, place);
  }
  absl::StatusOr<std::unique_ptr<Attachment>> AttachHost(std::span<const std::byte> bytes) override {
    return inner_->AttachHost(bytes);
  }
  absl::StatusOr<std::unique_ptr<Attachment>> AttachCudaIpc(std::span<const std::byte> handle, int device,
                                                            std::uint64_t bytes) override {
    return inner_->AttachCudaIpc(handle, device, bytes);
  }
  absl::Status CopyToHost(const Extent& from, std::span<std::byte> to) override { return inner_->CopyToHost(from, to); }
  absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(const Extent& keys, DType dtype,
                                                                      std::uint64_t rows,
                                                                      std::uint64_t max_groups) override {
    return inner_->OrderByKeyOnDevice(keys, dtype, rows, max_groups);
  }
  absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype, const Extent& values, DType dtype,
                                             std::uint64_t rows, std::uint64_t max_groups) override {
    return inner_->SumByKeyOnDevice(keys, key_dtype, values, dtype, rows, max_groups);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartKeptOnDevice(const AggregationPlan& plan,
                                                               const Placement& from) override {
    return inner_->StartKeptOnDevice(plan, from);
  }
  absl::Status Health() const override { return inner_->Health(); }
  std::vector<DeviceHealth> DevicesHealth() const override { return inner_->DevicesHealth(); }
  void SetMetrics(Metrics* metrics) override { inner_->SetMetrics(metrics); }

 private:
  absl::StatusOr<std::unique_ptr<Reduction>> Route(const AggregationPlan& plan, const Placement& from,
                                                   bool if_free) {
    std::vector<std::size_t> kept, fused;
    for (std::size_t i = 0; i < plan.ops.size(); ++i) (KeptByRegistry(plan.ops[i]) ? kept : fused).push_back(i);
    if (kept.empty()) return if_free ? inner_->StartIfFree(plan, from) : inner_->Start(plan, from);
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
      absl::StatusOr<std::unique_ptr<Reduction>> r = if_free ? inner_->StartIfFree(part, from) : inner_->Start(part, from);
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
        absl::StatusOr<std::unique_ptr<Reduction>> on_device = inner_->StartKeptOnDevice(part, from);
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
        copy = [backend = inner_.get()](const Extent& e, std::span<std::byte> to) { return backend->CopyToHost(e, to); };
      }
      kept_reduction = MakeStateReduction(plan, kept, &budget_, std::move(copy));
    }
    return std::unique_ptr<Reduction>(std::make_unique<SplitReduction>(
        std::move(fused_reduction), std::move(fused), std::move(kept_reduction), std::move(kept), plan.ops.size(),
        rules::SizeOf(plan.array.dtype)));
  }

  std::unique_ptr<Backend> inner_;
  HolisticBudget budget_;
};

}  // namespace

std::unique_ptr<Backend> MakeFunctionRouter(std::unique_ptr<Backend> inner, std::uint64_t max_holistic_bytes) {
  return std::make_unique<FunctionRouter>(std::move(inner), max_holistic_bytes);
}

}  // namespace tally
