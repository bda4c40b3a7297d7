#include "server/frontend/identity_quota.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/metrics/metrics.h"

namespace tally {

IdentityQuota::Charge& IdentityQuota::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = other.owner_;
    identity_ = std::move(other.identity_);
    amount_ = other.amount_;
    other.owner_ = nullptr;
    other.amount_ = 0;
  }
  return *this;
}

IdentityQuota::Charge IdentityQuota::Charge::Split(std::uint64_t amount) {
  if (owner_ == nullptr) return Charge();
  amount = std::min(amount, amount_);
  amount_ -= amount;
  return Charge(owner_, identity_, amount);
}

void IdentityQuota::Charge::Release() {
  if (owner_ != nullptr) owner_->Release(identity_, amount_);
  owner_ = nullptr;
  amount_ = 0;
}

IdentityQuota::IdentityQuota(std::string flag, std::string unit, std::uint64_t limit, Metrics* metrics)
    : flag_(std::move(flag)), unit_(std::move(unit)), limit_(limit), metrics_(metrics) {}

bool IdentityQuota::FitsLocked(const std::string& identity, std::uint64_t amount, bool alone_may_exceed) const {
  if (limit_ == 0 || amount == 0) return true;
  const auto it = used_.find(identity);
  const std::uint64_t held = it == used_.end() ? 0 : it->second;
  if (held == 0 && alone_may_exceed) return true;
  return held <= limit_ && amount <= limit_ - held;
}

absl::Status IdentityQuota::RefusalLocked(const std::string& identity, std::uint64_t amount, bool counted) const {
  if (counted && metrics_ != nullptr) metrics_->QuotaRejected(flag_);
  const auto it = used_.find(identity);
  return absl::ResourceExhaustedError(absl::StrCat(
      "quota: identity '", identity, "' holds ", it == used_.end() ? 0 : it->second, " ", unit_,
      " and this request needs ", amount, " more, beyond its quota of ", limit_, " (", flag_,
      "); wait for its other requests to finish, or ask for a larger quota."));
}

IdentityQuota::Charge IdentityQuota::TakeLocked(const std::string& identity, std::uint64_t amount) {
  if (amount == 0) return Charge();
  used_[identity] += amount;
  return Charge(this, identity, amount);
}

absl::StatusOr<IdentityQuota::Charge> IdentityQuota::TryCharge(const std::string& identity, std::uint64_t amount,
                                                               bool alone_may_exceed, bool probe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!FitsLocked(identity, amount, alone_may_exceed)) return RefusalLocked(identity, amount, !probe);
  return TakeLocked(identity, amount);
}

absl::StatusOr<IdentityQuota::Charge> IdentityQuota::ChargeBy(const std::string& identity, std::uint64_t amount,
                                                              std::chrono::steady_clock::time_point deadline,
                                                              bool alone_may_exceed) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!released_.wait_until(lock, deadline, [&] { return FitsLocked(identity, amount, alone_may_exceed); })) {
    return RefusalLocked(identity, amount, true);
  }
  return TakeLocked(identity, amount);
}

std::uint64_t IdentityQuota::used(const std::string& identity) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = used_.find(identity);
  return it == used_.end() ? 0 : it->second;
}

void IdentityQuota::Release(const std::string& identity, std::uint64_t amount) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = used_.find(identity);
    if (it == used_.end()) return;
    it->second -= std::min(it->second, amount);
    // Identities that hold nothing are forgotten: the map stays as small as
    // the set of callers with requests in progress.
    if (it->second == 0) used_.erase(it);
  }
  released_.notify_all();
}

}  // namespace tally
