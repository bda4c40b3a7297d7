// The tally client: sends an array to tally.v1.Aggregator and returns the
// results, choosing the unary or the streaming RPC by size; uploads resident
// datasets and aggregates, lists, describes and deletes them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tally/client/array.h"
#include "tally/client/channel.h"
#include "tally/client/element_range.h"
#include "tally/v1/tally.pb.h"

namespace tally::client {

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

enum class StreamMode {
  kAuto,    // unary below CallOptions::stream_threshold_bytes, else stream
  kAlways,  // AggregateStream
  kNever,   // Aggregate (the server refuses arrays above its unary limit)
};

struct CallOptions {
  StreamMode stream = StreamMode::kAuto;
  // Well below the server's default unary limit of 64 MiB, so auto never
  // sends a message the server refuses; large enough that small requests
  // skip the streaming round trips.
  std::uint64_t stream_threshold_bytes = 4 * kMiB;
  // Bytes per AggregateStream chunk message.
  std::uint64_t chunk_bytes = 4 * kMiB;
  // absl::InfiniteDuration(): no deadline.
  absl::Duration timeout = absl::InfiniteDuration();
  // Called on the calling thread after each chunk is handed to gRPC (and
  // once at the start and end of a unary call), with bytes sent so far and
  // the array's size.
  std::function<void(std::uint64_t sent, std::uint64_t total)> progress;
};

// How PutDataset sends a dataset.
struct PutOptions {
  // Replace a dataset of the same name (atomically: queries already running
  // finish on the old version) instead of failing with ALREADY_EXISTS.
  bool replace = false;
  // > 0: the server removes the dataset this long after the upload
  // completes; 0: it stays until deleted (or evicted). Whole and fractional
  // seconds go to the server as they are.
  absl::Duration ttl = absl::ZeroDuration();
  // Bytes per chunk message, as CallOptions::chunk_bytes.
  std::uint64_t chunk_bytes = 4 * kMiB;
  // absl::InfiniteDuration(): no deadline.
  absl::Duration timeout = absl::InfiniteDuration();
  // As CallOptions::progress.
  std::function<void(std::uint64_t sent, std::uint64_t total)> progress;
};

// Whether Aggregate() sends `array` with AggregateStream under `options`.
bool UsesStream(const ArrayRef& array, const CallOptions& options);

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
// "UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN".
absl::string_view ServingStatusName(ServingStatus status);

// Thread-safe: one Client may serve many threads at once; each call runs on
// the calling thread.
class Client {
 public:
  explicit Client(std::shared_ptr<grpc::Channel> channel);

  // Sends the array (never copying it: its bytes go to gRPC as borrowed
  // slices, so `array.data` must stay valid until this returns) and returns
  // the server's response or its status (code and message kept).
  [[nodiscard]] absl::StatusOr<v1::AggregateResponse> Aggregate(
      const ArrayRef& array, const std::vector<v1::Aggregation>& aggregations,
      const CallOptions& options = {});

  // Uploads `array` as the resident dataset `name` with PutDataset, never
  // copying its bytes (as Aggregate's stream). array.row_length, when not
  // 0, is the dataset's shape: its queries are cut into those rows unless
  // they give a row length of their own. The
  // server's status is returned with its code and message kept: e.g.
  // ALREADY_EXISTS without `replace`, RESOURCE_EXHAUSTED when the server's
  // --max_dataset_bytes leaves no room.
  [[nodiscard]] absl::StatusOr<v1::PutDatasetResponse> PutDataset(absl::string_view name,
                                                                  const ArrayRef& array,
                                                                  const PutOptions& options = {});

  // Aggregates the dataset `name`, or elements `range` of it, cut into rows
  // of `row_length` elements (0: one result per aggregation; std::nullopt:
  // the rows the dataset was uploaded with, if any) or into the
  // segments of `offsets` (counted from the range's start), skipping the
  // elements `validity` marks missing (bit 0 is the range's first). Results are
  // those Aggregate gives on the same elements (tally.proto says to what
  // precision); arg* indices count from the range's start. NOT_FOUND for an
  // unknown name.
  [[nodiscard]] absl::StatusOr<v1::AggregateResponse> AggregateDataset(
      absl::string_view name, std::optional<ElementRange> range, std::optional<std::uint64_t> row_length,
      const std::vector<v1::Aggregation>& aggregations,
      absl::Duration timeout = absl::InfiniteDuration(), std::span<const std::int64_t> offsets = {},
      std::span<const std::uint8_t> validity = {});

  // GroupBy (tally.proto's group-by rules): the answer's messages merged
  // into one response holding every group. A request whose columns carry
  // more than options.stream_threshold_bytes (StreamMode::kAuto) goes with
  // GroupByStream instead, each inline column's bytes, then its validity,
  // in chunks of options.chunk_bytes: a table of any size, the same answer.
  // options.progress is not called.
  [[nodiscard]] absl::StatusOr<v1::GroupByResponse> GroupBy(const v1::GroupByRequest& request,
                                                           const CallOptions& options = {});

  // Every dataset, by name, and what each place (GPU or host) holds: the
  // server's pages, followed to the last, in one answer (`timeout` for
  // each page).
  [[nodiscard]] absl::StatusOr<v1::ListDatasetsResponse> ListDatasets(
      absl::Duration timeout = absl::InfiniteDuration());
  // One page: up to `page_size` datasets (0: the server's most, 1000) after
  // `page_token` ("" for the first page; then the last answer's
  // next_page_token, empty once the last page came).
  [[nodiscard]] absl::StatusOr<v1::ListDatasetsResponse> ListDatasetsPage(
      std::uint32_t page_size, absl::string_view page_token, absl::Duration timeout = absl::InfiniteDuration());
  // NOT_FOUND for an unknown name.
  [[nodiscard]] absl::StatusOr<v1::DatasetInfo> DescribeDataset(
      absl::string_view name, absl::Duration timeout = absl::InfiniteDuration());
  // Removes the name at once and returns what it held; queries reading the
  // dataset finish on it. NOT_FOUND for an unknown name.
  [[nodiscard]] absl::StatusOr<v1::DatasetInfo> DeleteDataset(
      absl::string_view name, absl::Duration timeout = absl::InfiniteDuration());

  // Shared-memory regions (tally.v1.SharedMemory; tally.proto has the
  // rules). A host region is `byte_size` bytes from `offset` of the POSIX
  // shared-memory object `shm_name` (see SharedMemoryObject); a CUDA region
  // the first `byte_size` bytes of an allocation exported with
  // cudaIpcGetMemHandle (`ipc_handle`: its 64 bytes) on GPU `device`.
  [[nodiscard]] absl::StatusOr<v1::RegionInfo> RegisterHostRegion(
      absl::string_view name, absl::string_view shm_name, std::uint64_t offset, std::uint64_t byte_size,
      absl::Duration timeout = absl::InfiniteDuration());
  [[nodiscard]] absl::StatusOr<v1::RegionInfo> RegisterCudaRegion(
      absl::string_view name, absl::string_view ipc_handle, int device, std::uint64_t byte_size,
      absl::Duration timeout = absl::InfiniteDuration());
  [[nodiscard]] absl::StatusOr<v1::RegionInfo> UnregisterRegion(
      absl::string_view name, absl::Duration timeout = absl::InfiniteDuration());
  [[nodiscard]] absl::StatusOr<v1::ListRegionsResponse> ListRegions(
      absl::Duration timeout = absl::InfiniteDuration());
  // Aggregates `spec.length` elements of `spec.dtype` from byte `offset` of
  // region `region`, cut into rows of spec.row_length.
  [[nodiscard]] absl::StatusOr<v1::AggregateResponse> AggregateRegion(
      absl::string_view region, std::uint64_t offset, const v1::ArraySpec& spec,
      const std::vector<v1::Aggregation>& aggregations, absl::Duration timeout = absl::InfiniteDuration());
  // Uploads the dataset `name` from `length` elements of `dtype` at byte
  // `offset` of `region` (one copy, on the server).
  [[nodiscard]] absl::StatusOr<v1::PutDatasetResponse> PutDatasetFromRegion(
      absl::string_view name, absl::string_view region, std::uint64_t offset, v1::DType dtype,
      std::uint64_t length, const PutOptions& options = {});

  // grpc.health.v1.Health/Check for `service` ("" asks about the server as
  // a whole, "tally.v1.Aggregator" about the aggregation service).
  [[nodiscard]] absl::StatusOr<ServingStatus> CheckHealth(absl::string_view service,
                                                          absl::Duration timeout);

  // Waits until the channel is connected, for tools that want connection
  // setup out of their measurements.
  bool WaitForConnected(absl::Duration timeout);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  absl::StatusOr<v1::AggregateResponse> Unary(const ArrayRef& array,
                                              const std::vector<v1::Aggregation>& aggregations,
                                              const CallOptions& options);
  absl::StatusOr<v1::AggregateResponse> Stream(const ArrayRef& array,
                                               const std::vector<v1::Aggregation>& aggregations,
                                               const CallOptions& options);

  std::shared_ptr<grpc::Channel> channel_;
  grpc::GenericStub stub_;
};

}  // namespace tally::client
