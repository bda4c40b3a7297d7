// A backend that passes every question to another. The layers above the
// backends (the router between the cpu and a GPU backend, the functions'
// router) derive from it, override what they decide, and forward the rest.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/backend.h"

namespace tally {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> to) : to_(std::move(to)) {}

  std::string name() const override { return to_->name(); }
  std::string device() const override { return to_->device(); }
  absl::Status Runs(const AggregationPlan& plan, const Placement& from) const override {
    return to_->Runs(plan, from);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    return to_->Start(plan, from);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan, const Placement& from,
                                                         std::chrono::milliseconds wait) override {
    return to_->StartWithin(plan, from, wait);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartIfFree(const AggregationPlan& plan,
                                                         const Placement& from) override {
    return to_->StartIfFree(plan, from);
  }
  std::vector<ResidentPlace> ResidentPlaces() const override { return to_->ResidentPlaces(); }
  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(std::uint64_t bytes, int place) override {
    return to_->AllocateResident(bytes, place);
  }
  absl::StatusOr<std::unique_ptr<Attachment>> AttachHost(std::span<const std::byte> bytes) override {
    return to_->AttachHost(bytes);
  }
  absl::StatusOr<std::unique_ptr<Attachment>> AttachCudaIpc(std::span<const std::byte> handle, int device,
                                                             std::uint64_t bytes) override {
    return to_->AttachCudaIpc(handle, device, bytes);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartKeptOnDevice(const AggregationPlan& plan,
                                                               const Placement& from) override {
    return to_->StartKeptOnDevice(plan, from);
  }
  absl::StatusOr<std::unique_ptr<DeviceGroupOrder>> OrderByKeyOnDevice(const Extent& keys, DType dtype,
                                                                      std::uint64_t rows,
                                                                      std::uint64_t max_groups) override {
    return to_->OrderByKeyOnDevice(keys, dtype, rows, max_groups);
  }
  absl::StatusOr<KeyedSums> SumByKeyOnDevice(const Extent& keys, DType key_dtype, const Extent& values, DType dtype,
                                             std::uint64_t rows, std::uint64_t max_groups,
                                             DirectFacts facts, KeyedArrays arrays) override {
    return to_->SumByKeyOnDevice(keys, key_dtype, values, dtype, rows, max_groups, facts, arrays);
  }
  absl::StatusOr<NumberedKeyColumn> NumberKeysOnDevice(const Extent& keys, DType dtype, std::uint64_t rows,
                                                       std::uint64_t max_groups) override {
    return to_->NumberKeysOnDevice(keys, dtype, rows, max_groups);
  }
  absl::StatusOr<CombinedKeyColumn> CombineKeysOnDevice(std::span<const Extent> keys, std::span<const DType> dtypes,
                                                        std::uint64_t rows) override {
    return to_->CombineKeysOnDevice(keys, dtypes, rows);
  }
  absl::StatusOr<std::vector<std::unique_ptr<DeviceColumn>>> CopyToDevice(
      std::span<const std::span<const std::byte>> columns, std::uint64_t rows) override {
    return to_->CopyToDevice(columns, rows);
  }
  absl::Status CopyToHost(const Extent& from, std::span<std::byte> to) override { return to_->CopyToHost(from, to); }
  cpu::ThreadPool* HostWorkers() override { return to_->HostWorkers(); }
  absl::Status Health() const override { return to_->Health(); }
  std::vector<DeviceHealth> DevicesHealth() const override { return to_->DevicesHealth(); }
  void SetMetrics(Metrics* metrics) override { to_->SetMetrics(metrics); }

 protected:
  Backend& to() const { return *to_; }

 private:
  std::unique_ptr<Backend> to_;
};

}  // namespace tally
