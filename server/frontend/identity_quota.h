// Per-identity quotas: how much of one resource (bytes in flight, streams,
// resident dataset bytes) each authenticated identity may hold at once. One
// IdentityQuota accounts for one resource; a caller Charges it for what it
// takes and the Charge, an RAII owner, gives it back when destroyed.
//
// A new kind of holding (registered shared-memory or IPC region bytes, say)
// adds one more IdentityQuota with its own flag name, charged where the
// holding is created and kept alive exactly as long as the holding: nothing
// else changes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace tally {

class Metrics;

class IdentityQuota {
 public:
  // What one identity holds of the resource; released when destroyed.
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept { *this = std::move(other); }
    Charge& operator=(Charge&& other) noexcept;
    ~Charge() { Release(); }
    // Gives the amount back now (idempotent).
    void Release();
    // Moves `amount` of this charge (at most all of it) to a charge of its
    // own, to be given back at another time.
    Charge Split(std::uint64_t amount);
    std::uint64_t amount() const { return amount_; }

   private:
    friend class IdentityQuota;
    Charge(IdentityQuota* owner, std::string identity, std::uint64_t amount)
        : owner_(owner), identity_(std::move(identity)), amount_(amount) {}
    IdentityQuota* owner_ = nullptr;
    std::string identity_;
    std::uint64_t amount_ = 0;
  };

  // `flag` names the limit in refusals ("--quota_streams"); `unit` says what
  // is counted ("bytes in flight", "streams"). `limit` 0: no quota (charges
  // always succeed, and are still counted). `metrics` may be null.
  IdentityQuota(std::string flag, std::string unit, std::uint64_t limit, Metrics* metrics);
  IdentityQuota(const IdentityQuota&) = delete;
  IdentityQuota& operator=(const IdentityQuota&) = delete;

  // Charges `amount` to `identity` at once, or fails with RESOURCE_EXHAUSTED
  // naming the flag. With `alone_may_exceed`, a charge larger than the whole
  // quota succeeds when the identity holds nothing else (as the server-wide
  // in-flight budget lets one oversized request run alone).
  // `probe`: a refusal is not counted in tally_quota_rejections_total,
  // because the caller asks again (ChargeBy) and that answer counts.
  [[nodiscard]] absl::StatusOr<Charge> TryCharge(const std::string& identity, std::uint64_t amount,
                                                 bool alone_may_exceed = false, bool probe = false);
  // Waits until `deadline` for the identity's own holdings to make room.
  [[nodiscard]] absl::StatusOr<Charge> ChargeBy(const std::string& identity, std::uint64_t amount,
                                                std::chrono::steady_clock::time_point deadline,
                                                bool alone_may_exceed = false);

  std::uint64_t used(const std::string& identity) const;
  std::uint64_t limit() const { return limit_; }
  const std::string& flag() const { return flag_; }

 private:
  bool FitsLocked(const std::string& identity, std::uint64_t amount, bool alone_may_exceed) const;
  absl::Status RefusalLocked(const std::string& identity, std::uint64_t amount, bool counted) const;
  Charge TakeLocked(const std::string& identity, std::uint64_t amount);
  void Release(const std::string& identity, std::uint64_t amount);

  const std::string flag_;
  const std::string unit_;
  const std::uint64_t limit_;
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::map<std::string, std::uint64_t, std::less<>> used_;  // identities holding something
};

struct QuotaOptions {
  // Per identity; 0: no quota.
  std::uint64_t inflight_bytes = 0;  // bytes of requests in progress (as --max_inflight_bytes counts them)
  std::uint64_t streams = 0;         // AggregateStream and PutDataset calls in progress
  std::uint64_t dataset_bytes = 0;   // resident dataset bytes (and each one's overhead), until freed
  std::uint64_t datasets = 0;        // resident datasets, uploading or published, until freed
  std::uint64_t region_bytes = 0;    // shared-memory region bytes registered, until unmapped
};

// Every per-identity quota of a server. Outlives everything charged to it:
// a dataset's charge lasts until its memory is freed.
struct IdentityQuotas {
  IdentityQuotas(const QuotaOptions& options, Metrics* metrics)
      : inflight_bytes("--quota_inflight_bytes", "bytes in flight", options.inflight_bytes, metrics),
        streams("--quota_streams", "streams", options.streams, metrics),
        dataset_bytes("--quota_dataset_bytes", "bytes of resident datasets", options.dataset_bytes, metrics),
        datasets("--quota_datasets", "datasets", options.datasets, metrics),
        region_bytes("--quota_region_bytes", "bytes of shared-memory regions", options.region_bytes, metrics) {}
  IdentityQuota inflight_bytes;
  IdentityQuota streams;
  IdentityQuota dataset_bytes;
  IdentityQuota datasets;
  IdentityQuota region_bytes;
};

}  // namespace tally
