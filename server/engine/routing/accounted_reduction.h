// A Reduction that holds its share of a path's load (routing::Load) while it
// lives: added when the route is chosen, taken back when the request ends,
// however it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "server/engine/backend.h"

namespace tally::routing {

class AccountedReduction final : public Reduction {
 public:
  // `amount` is added to `account`, and one to `requests` (may be null).
  AccountedReduction(std::unique_ptr<Reduction> inner, std::atomic<std::int64_t>* account, std::int64_t amount,
                     std::atomic<std::int64_t>* requests = nullptr)
      : inner_(std::move(inner)), account_(account), amount_(amount), requests_(requests) {
    account_->fetch_add(amount_, std::memory_order_relaxed);
    if (requests_ != nullptr) requests_->fetch_add(1, std::memory_order_relaxed);
  }
  ~AccountedReduction() override {
    account_->fetch_sub(amount_, std::memory_order_relaxed);
    if (requests_ != nullptr) requests_->fetch_sub(1, std::memory_order_relaxed);
  }
  AccountedReduction(const AccountedReduction&) = delete;
  AccountedReduction& operator=(const AccountedReduction&) = delete;

  absl::Status Consume(const Extent& elements) override { return inner_->Consume(elements); }
  absl::Status ConsumeRuns(const HostRuns& runs) override { return inner_->ConsumeRuns(runs); }
  absl::Status Seal() override { return inner_->Seal(); }
  absl::StatusOr<AggregationResult> Finish() override { return inner_->Finish(); }
  std::size_t element_size() const override { return inner_->element_size(); }

 private:
  std::unique_ptr<Reduction> inner_;
  std::atomic<std::int64_t>* const account_;
  const std::int64_t amount_;
  std::atomic<std::int64_t>* const requests_;
};

}  // namespace tally::routing
