// tally's Prometheus metrics: the one owner of the registry. Every family is
// built in Metrics' constructor; the rest of the server only calls the
// recording methods below, which are cheap (cached children, no string
// building) and safe to call from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tally/rules/op.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace tally {

class Metrics {
 public:
  // The RPCs of tally.v1.Aggregator, as the `method` label spells them.
  enum class Method : std::uint8_t {
    kAggregate,
    kAggregateStream,
    kPutDataset,
    kAggregateDataset,
    kListDatasets,
    kDescribeDataset,
    kDeleteDataset,
    kRegisterHostRegion,
    kRegisterCudaRegion,
    kUnregisterRegion,
    kListRegions,
    kAggregateRegion,
    kPutDatasetFromRegion,
    kGroupBy,
    kGroupByStream,
  };
  static constexpr int kNumMethods = 15;

  struct Options {
    std::string backend;  // "cpu", "cuda", "null": a constant label on every family
    std::string device;   // e.g. "NVIDIA H100 80GB HBM3 (0)"; only on tally_build_info
    std::string version;  // tally's version, on tally_build_info
    // Identities named in the `identity` label; the others are "other", so
    // the request series stay bounded however many identities call.
    int max_identities = 16;
  };

  // The `identity` label's slots: calls without authentication, and the
  // identities beyond Options::max_identities.
  static constexpr int kAnonymousIdentity = 0;
  static constexpr int kOtherIdentity = 1;
  static constexpr char kAnonymousLabel[] = "anonymous";
  static constexpr char kOtherLabel[] = "other";

  // Upper bounds of tally_request_duration_seconds: 50 us to 60 s.
  static constexpr std::array<double, 19> kDurationBuckets = {
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
      0.1,   0.25,   0.5,    1.0,    2.5,  5.0,    10.0, 30.0,  60.0};
  // Upper bounds of tally_queue_wait_seconds: 10 us to 10 s.
  static constexpr std::array<double, 13> kQueueWaitBuckets = {
      10e-6, 50e-6, 100e-6, 500e-6, 1e-3, 5e-3, 10e-3, 50e-3, 0.1, 0.5, 1.0, 5.0, 10.0};

  explicit Metrics(const Options& options);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Starts the HTTP exposer on `address` ("0.0.0.0:9464"; port 0 picks a free
  // one). Empty: metrics stay in-process only (Scrape() still works).
  // Fails with UNAVAILABLE if the address can't be bound, INVALID_ARGUMENT
  // if it is malformed, FAILED_PRECONDITION if already serving.
  [[nodiscard]] absl::Status Serve(const std::string& address);
  // The port the exposer listens on, or 0 when not serving.
  int port() const;

  // The registry in Prometheus' text exposition format.
  std::string Scrape() const;

  // Request lifecycle. Every RequestStarted() must be followed by exactly one
  // RequestFinished() with the same method. `ops` are the aggregations the
  // request asked for (empty when it failed before they were known);
  // `grpc_status_code` is the grpc::StatusCode it ended with; `seconds` runs
  // from the first byte received to the response.
  // `identity` is the caller's slot from IdentitySlot().
  void RequestStarted(Method method);
  void RequestFinished(Method method, std::span<const rules::OpKind> ops, int grpc_status_code,
                       double seconds, int identity = kAnonymousIdentity);
  // The slot of the `identity` label for an authenticated identity: its own
  // name for the first max_identities seen, "other" after that (first come,
  // first named, for the life of the process).
  int IdentitySlot(const std::string& identity);
  // A request refused because its identity was over a quota; `flag` names
  // the quota ("--quota_streams"). Also counted by RequestFinished().
  void QuotaRejected(const std::string& flag);
  // The per-identity quotas' flags, whose refusal series exist from the start.
  static constexpr std::array<const char*, 4> kQuotaFlags = {"--quota_inflight_bytes", "--quota_streams",
                                                             "--quota_dataset_bytes", "--quota_datasets"};
  // A request turned away by admission control (RESOURCE_EXHAUSTED). It is
  // still counted by RequestFinished(); this counter says why.
  void AdmissionRejected();

  void BytesReceived(std::uint64_t bytes, int identity = kAnonymousIdentity);
  void ElementsProcessed(std::uint64_t elements);
  // Payload bytes held by requests in progress: +n when taken, -n when freed.
  void InFlightBytes(std::int64_t delta);
  // Time a request (or chunk) waited for a worker, stream or pinned buffer.
  void QueueWait(double seconds);
  // A request of host bytes that a server with a GPU routed by cost: to the
  // GPU, to the CPU by the estimate, or to the CPU because every lane was
  // busy at that moment.
  enum class Route { kGpu, kCpuByCost, kCpuLanesBusy };
  void Routed(Route route);

  // Per-GPU work; `device` is the CUDA ordinal.
  void HostToDevice(int device, std::uint64_t bytes, double seconds);
  // Of those bytes, the ones copied from where they were received (the
  // pinned receive arena) with no CPU copy into staging first.
  void HostToDeviceDirect(int device, std::uint64_t bytes);
  void KernelTime(int device, double seconds);
  void SetDeviceMemory(int device, const std::string& name, std::uint64_t used,
                       std::uint64_t total);
  void SetPinnedPool(std::uint64_t total, std::uint64_t used);
  // Whether a device (by its place, "cuda:1") takes new requests: 0 once it
  // is lost (a sticky CUDA error), while the others go on serving.
  void SetDeviceServing(const std::string& place, bool serving);

  // Resident datasets. `place` is where they live ("cuda:0", "host"):
  // bytes charged there, datasets published, and the limit (0: none).
  void SetResidentDatasets(const std::string& place, std::uint64_t bytes, std::uint64_t datasets,
                           std::uint64_t limit_bytes);
  void DatasetUploaded();
  void DatasetQueried();
  void DatasetEvicted();
  void DatasetExpired();
  void DatasetDeleted();

  // Registered shared-memory regions: how many are registered, the bytes
  // charged against --max_region_bytes, and that limit (0: none).
  void SetRegions(std::uint64_t regions, std::uint64_t bytes, std::uint64_t limit_bytes);
  void RegionQueried();

  // A GroupBy answered: grouped on a GPU (the device's order by key) or on
  // the host, over `rows` rows into `groups` groups.
  void GroupedBy(bool on_device, std::uint64_t rows, std::uint64_t groups);

  // The gRPC canonical name of a status code ("OK", "INVALID_ARGUMENT");
  // "UNKNOWN" for numbers outside 0..16.
  static const char* CodeName(int grpc_status_code);
  static const char* MethodName(Method method);
  // Whether requests of `method` carry aggregations (and so op series).
  static bool CarriesOps(Method method);

 private:
  static constexpr int kNumCodes = 17;
  // Devices whose children are cached; higher ordinals still work through
  // the family's own (locked) lookup.
  static constexpr int kCachedDevices = 16;

  struct DeviceChildren {
    prometheus::Counter* h2d_bytes = nullptr;
    prometheus::Counter* h2d_seconds = nullptr;
    prometheus::Counter* kernel_seconds = nullptr;
    prometheus::Counter* h2d_direct_bytes = nullptr;
  };
  DeviceChildren Device(int device);
  prometheus::Counter& RequestCounter(int method, int code, int identity);
  prometheus::Counter& ReceivedCounter(int identity);
  const std::string& IdentityLabel(int identity);
  prometheus::Counter& OpCounter(int method, int op, int code);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;

  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* aggregations_;
  prometheus::Family<prometheus::Counter>* h2d_bytes_;
  prometheus::Family<prometheus::Counter>* h2d_seconds_;
  prometheus::Family<prometheus::Counter>* kernel_seconds_;
  prometheus::Family<prometheus::Counter>* h2d_direct_bytes_;
  prometheus::Family<prometheus::Gauge>* device_memory_used_;
  prometheus::Family<prometheus::Gauge>* device_serving_;
  prometheus::Family<prometheus::Gauge>* device_memory_capacity_;

  std::array<prometheus::Histogram*, kNumMethods> duration_{};
  std::array<prometheus::Gauge*, kNumMethods> in_flight_{};
  prometheus::Family<prometheus::Counter>* received_bytes_;
  prometheus::Family<prometheus::Counter>* quota_rejections_;
  prometheus::Counter* processed_elements_;
  prometheus::Counter* admission_rejections_;
  std::array<prometheus::Counter*, 3> routed_{};  // by Route
  prometheus::Gauge* in_flight_bytes_;
  prometheus::Histogram* queue_wait_;
  prometheus::Gauge* pinned_capacity_;
  prometheus::Family<prometheus::Gauge>* resident_bytes_;
  prometheus::Family<prometheus::Gauge>* resident_datasets_;
  prometheus::Family<prometheus::Gauge>* resident_limit_;
  prometheus::Counter* dataset_uploads_;
  prometheus::Counter* dataset_queries_;
  prometheus::Counter* dataset_evictions_;
  prometheus::Counter* dataset_expiries_;
  prometheus::Counter* dataset_deletions_;
  prometheus::Gauge* pinned_used_;
  prometheus::Gauge* regions_;
  prometheus::Gauge* region_bytes_;
  prometheus::Gauge* region_limit_;
  prometheus::Counter* region_queries_;
  // By path: [0] host, [1] device.
  std::array<prometheus::Counter*, 2> group_by_requests_{}, group_by_rows_{}, group_by_groups_{};

  // Children created on first use and cached; Family::Add returns the same
  // child for the same labels, so a race only stores the same pointer twice.
  // Indexed by (identity slot, method, code) and identity slot.
  std::unique_ptr<std::atomic<prometheus::Counter*>[]> request_children_;
  std::unique_ptr<std::atomic<prometheus::Counter*>[]> received_children_;
  // Identity slots: names by slot, and slots by name, under identity_mutex_.
  const int max_identities_;
  std::mutex identity_mutex_;
  std::vector<std::string> identity_labels_;
  std::map<std::string, int, std::less<>> identity_slots_;
  std::array<std::atomic<prometheus::Counter*>, kNumMethods * rules::kNumOpKinds * kNumCodes>
      op_children_{};
  // Filled once per device under device_mutex_, then published.
  std::mutex device_mutex_;
  std::array<std::atomic<const DeviceChildren*>, kCachedDevices> device_children_{};
  std::array<DeviceChildren, kCachedDevices> device_storage_{};
};

}  // namespace tally
