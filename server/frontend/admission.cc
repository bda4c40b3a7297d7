#include "server/frontend/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/metrics/metrics.h"

namespace tally {

AdmissionController::Ticket& AdmissionController::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->Release(bytes_);
    owner_ = other.owner_;
    bytes_ = other.bytes_;
    quota_ = std::move(other.quota_);
    other.owner_ = nullptr;
  }
  return *this;
}

AdmissionController::Ticket AdmissionController::Ticket::Split(std::uint64_t bytes) {
  if (owner_ == nullptr) return Ticket();
  bytes = std::min(bytes, bytes_);
  Ticket part(owner_, bytes);
  part.quota_ = quota_.Split(bytes);
  bytes_ -= bytes;
  return part;
}

AdmissionController::Ticket::~Ticket() {
  if (owner_ != nullptr) owner_->Release(bytes_);
}

bool AdmissionController::FitsLocked(std::uint64_t bytes) const {
  return budget_ == 0 || bytes == 0 || in_flight_ == 0 || in_flight_ + bytes <= budget_;
}

absl::Status AdmissionController::Refusal(std::uint64_t bytes, bool counted) const {
  if (counted && metrics_ != nullptr) metrics_->AdmissionRejected();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server is busy: ", in_flight_, " bytes of requests are in progress and this one needs ", bytes,
      " more, beyond the ", budget_, "-byte limit (--max_inflight_bytes) after waiting ", max_wait_.count(),
      " ms; retry with backoff."));
}

// The identity's quota is charged first: a caller over its own quota is
// refused for that reason, whatever room the server has. A request larger
// than the quota may run when its identity holds nothing else, as one larger
// than the whole budget may run alone.
absl::StatusOr<AdmissionController::Ticket> AdmissionController::TryAdmit(std::uint64_t bytes,
                                                                           const std::string& identity) {
  IdentityQuota::Charge quota;
  if (per_identity_ != nullptr) {
    absl::StatusOr<IdentityQuota::Charge> charged = per_identity_->TryCharge(identity, bytes, true, /*probe=*/true);
    if (!charged.ok()) return charged.status();
    quota = std::move(*charged);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!FitsLocked(bytes)) return Refusal(bytes, /*counted=*/false);
  return Take(bytes, std::move(quota));
}

absl::StatusOr<AdmissionController::Ticket> AdmissionController::Admit(std::uint64_t bytes,
                                                                        const std::string& identity) {
  const auto deadline = std::chrono::steady_clock::now() + max_wait_;
  IdentityQuota::Charge quota;
  if (per_identity_ != nullptr) {
    absl::StatusOr<IdentityQuota::Charge> charged = per_identity_->ChargeBy(identity, bytes, deadline, true);
    if (!charged.ok()) return charged.status();
    quota = std::move(*charged);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!freed_.wait_until(lock, deadline, [&] { return FitsLocked(bytes); })) {
    return Refusal(bytes, /*counted=*/true);
  }
  return Take(bytes, std::move(quota));
}

AdmissionController::Ticket AdmissionController::Take(std::uint64_t bytes, IdentityQuota::Charge quota) {
  in_flight_ += bytes;
  if (metrics_ != nullptr) metrics_->InFlightBytes(static_cast<std::int64_t>(bytes));
  Ticket ticket(this, bytes);
  ticket.quota_ = std::move(quota);
  return ticket;
}

std::uint64_t AdmissionController::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void AdmissionController::Release(std::uint64_t bytes) {
  {
    // The gauge moves under the lock, as in Take: outside it, a request
    // admitted into the room just freed could be added to the gauge before
    // this release was taken off it, and tally_in_flight_bytes showed more
    // than --max_inflight_bytes for a moment.
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ -= bytes;
    if (metrics_ != nullptr) metrics_->InFlightBytes(-static_cast<std::int64_t>(bytes));
  }
  freed_.notify_all();
}

}  // namespace tally
