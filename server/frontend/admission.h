// Admission control: bounds the bytes held by requests in progress. A request
// reserves its bytes before work starts; when the budget is spent it waits a
// short while for others to finish, then is refused with RESOURCE_EXHAUSTED,
// so a burst of large requests cannot exhaust the server's memory. With a
// per-identity quota, the same bytes are charged to the caller's identity
// too, so one identity cannot take the whole budget.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include <string>

#include "absl/status/statusor.h"
#include "server/frontend/identity_quota.h"

namespace tally {

class Metrics;

class AdmissionController {
 public:
  // The reservation a request holds; gives its bytes back when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept
        : owner_(other.owner_), bytes_(other.bytes_), quota_(std::move(other.quota_)) {
      other.owner_ = nullptr;
    }
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();
    std::uint64_t bytes() const { return bytes_; }
    // Moves `bytes` of this reservation (at most all of it), and their
    // share of the identity's charge, to a ticket of its own: admitted as
    // one request, given back at two times.
    Ticket Split(std::uint64_t bytes);

   private:
    friend class AdmissionController;
    Ticket(AdmissionController* owner, std::uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    AdmissionController* owner_ = nullptr;
    std::uint64_t bytes_ = 0;
    IdentityQuota::Charge quota_;  // the same bytes, charged to the caller's identity
  };

  // budget_bytes 0: no limit. `per_identity` (may be null) is charged the
  // same bytes to the caller's identity, and must outlive every ticket.
  // `metrics` (may be null) sees the bytes in flight and the refusals.
  AdmissionController(std::uint64_t budget_bytes, std::chrono::milliseconds max_wait, IdentityQuota* per_identity,
                      Metrics* metrics)
      : budget_(budget_bytes), max_wait_(max_wait), per_identity_(per_identity), metrics_(metrics) {}

  // Reserves `bytes` (a request larger than the whole budget may still run
  // alone, when nothing else holds any). Without waiting: fails at once
  // when the budget is spent. A probe: every caller that is refused asks
  // again with Admit, so this refusal is not counted in the metrics (once
  // per refused request, not twice).
  [[nodiscard]] absl::StatusOr<Ticket> TryAdmit(std::uint64_t bytes, const std::string& identity);
  // Waits up to the configured maximum for room (the identity's, then the
  // server's).
  [[nodiscard]] absl::StatusOr<Ticket> Admit(std::uint64_t bytes, const std::string& identity);

  std::uint64_t in_flight() const;

 private:
  bool FitsLocked(std::uint64_t bytes) const;
  absl::Status Refusal(std::uint64_t bytes, bool counted) const;
  Ticket Take(std::uint64_t bytes, IdentityQuota::Charge quota);
  void Release(std::uint64_t bytes);

  const std::uint64_t budget_;
  const std::chrono::milliseconds max_wait_;
  IdentityQuota* const per_identity_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::uint64_t in_flight_ = 0;
};

}  // namespace tally
