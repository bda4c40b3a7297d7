// The client's calls: unary Aggregate for small arrays, client-streaming
// AggregateStream for large ones and PutDataset for uploads, and the small
// unary dataset calls. All go through gRPC's generic stub so an array's bytes
// reach gRPC as borrowed slices: the generated stubs would copy every byte
// into a protobuf string and then again into the wire buffer, which for a
// many-GiB array (or a load test measuring transport overhead) is the
// dominant cost.
#include "tally/client/client.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/channel_arguments.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tally/client/group_by.h"
#include "tally/client/status.h"
#include "tally/client/wire.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally::client {
namespace {

// AggregateRequest.data, AggregateStreamRequest.chunk and
// PutDatasetRequest.chunk are all field 2, length-delimited; the
// hand-written field key below relies on it.
static_assert(v1::AggregateRequest::kDataFieldNumber == 2);
static_assert(v1::AggregateStreamRequest::kChunkFieldNumber == 2);
static_assert(v1::PutDatasetRequest::kChunkFieldNumber == 2);
constexpr char kBytesField2Key = (2 << 3) | 2;  // field 2, wire type LEN

// The largest message protobuf parses (INT_MAX bytes).
constexpr std::uint64_t kMaxMessageBytes = INT_MAX;
constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{1} << 30;

// The key and length that precede `length` bytes of field 2 on the wire.
std::string BytesFieldPrefix(std::uint64_t length) {
  std::string out(1, kBytesField2Key);
  do {
    const auto low = static_cast<char>(length & 0x7f);
    length >>= 7;
    out.push_back(static_cast<char>(low | (length != 0 ? 0x80 : 0)));
  } while (length != 0);
  return out;
}

// A message made of `head` (serialized protobuf fields, copied: it is small)
// followed by field 2 holding the borrowed bytes [data, data + length).
// Protobuf merges concatenated fields, so this parses exactly as if the
// bytes had been set on the message. STATIC_SLICE tells gRPC not to free
// them; the caller keeps them alive until the call completes.
grpc::ByteBuffer MessageWithBorrowedBytes(std::string head, const std::byte* data,
                                          std::uint64_t length) {
  if (length == 0) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  head += BytesFieldPrefix(length);
  grpc::Slice slices[2] = {grpc::Slice(head),
                           grpc::Slice(data, length, grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, 2);
}

template <typename Response>
absl::StatusOr<Response> ParseResponse(grpc::ByteBuffer* reply) {
  Response response;
  const grpc::Status parsed = grpc::SerializationTraits<Response>::Deserialize(reply, &response);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat("cannot parse the server's response: ",
                                            parsed.error_message()));
  }
  return response;
}

void SetDeadline(grpc::ClientContext& context, absl::Duration timeout) {
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
}

// A completion queue for one call, driven from the calling thread with one
// operation in flight at a time, which keeps the call synchronous (progress
// callbacks run on the caller's thread) while allowing borrowed slices.
class CallQueue {
 public:
  CallQueue() = default;
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;
  ~CallQueue() {
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  grpc::CompletionQueue* get() { return &queue_; }
  void* tag() { return this; }

  // Waits for the operation in flight; false when it failed (the call is
  // over: its status says why).
  bool Wait() {
    void* tag = nullptr;
    bool ok = false;
    return queue_.Next(&tag, &ok) && ok;
  }

 private:
  grpc::CompletionQueue queue_;
};

// grpc.health.v1 messages, encoded by hand: the service is two one-field
// messages, and generating health.proto here would clash with the copy
// inside libgrpc++. HealthCheckRequest{string service = 1}.
grpc::ByteBuffer HealthCheckRequest(absl::string_view service) {
  std::string bytes;
  if (!service.empty()) {  // the streams flush into `bytes` when they go
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    google::protobuf::internal::WireFormatLite::WriteString(1, std::string(service), &coded);
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// HealthCheckResponse{ServingStatus status = 1}; other fields are skipped.
absl::StatusOr<ServingStatus> ParseHealthCheckResponse(const grpc::ByteBuffer& reply) {
  std::vector<grpc::Slice> slices;
  if (!reply.Dump(&slices).ok()) return absl::DataLossError("unreadable health response");
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  std::uint32_t status = 0;
  while (const std::uint32_t tag = in.ReadTag()) {
    using Wire = google::protobuf::internal::WireFormatLite;
    if (tag == Wire::MakeTag(1, Wire::WIRETYPE_VARINT)) {
      if (!in.ReadVarint32(&status)) return absl::DataLossError("bad health response");
    } else if (!Wire::SkipField(&in, tag)) {
      return absl::DataLossError("bad health response");
    }
  }
  if (status > 3) return ServingStatus::kUnknown;
  return static_cast<ServingStatus>(status);
}

// One unary call through the generic stub, waited for.
absl::StatusOr<grpc::ByteBuffer> CallUnary(grpc::GenericStub& stub, const std::string& method,
                                           const grpc::ByteBuffer& request, absl::Duration timeout) {
  CallQueue queue;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, method, request, queue.get());
  call->StartCall();
  grpc::ByteBuffer reply;
  grpc::Status status;
  call->Finish(&reply, &status, queue.tag());
  queue.Wait();
  if (!status.ok()) return FromGrpcStatus(status);
  return reply;
}

// A unary call of small protobuf messages (no borrowed bytes).
template <typename Response, typename Request>
absl::StatusOr<Response> CallMessage(grpc::GenericStub& stub, const std::string& method,
                                     const Request& request, absl::Duration timeout) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  const grpc::Status serialized =
      grpc::SerializationTraits<Request>::Serialize(request, &buffer, &own_buffer);
  if (!serialized.ok()) {
    return absl::InternalError(absl::StrCat("cannot serialize the request: ", serialized.error_message()));
  }
  absl::StatusOr<grpc::ByteBuffer> reply = CallUnary(stub, method, buffer, timeout);
  if (!reply.ok()) return reply.status();
  return ParseResponse<Response>(&*reply);
}

// What a client-streaming upload (AggregateStream, PutDataset) sends after
// its header: `total` bytes from `data` in chunks of `chunk_bytes`.
struct StreamedBytes {
  const std::byte* data = nullptr;
  std::uint64_t total = 0;
  std::uint64_t chunk_bytes = 0;
  absl::Duration timeout = absl::InfiniteDuration();
  const std::function<void(std::uint64_t, std::uint64_t)>* progress = nullptr;
};

// One client-streaming call: `header` (a serialized first message), then the
// bytes as chunk messages (field 2) borrowing from `bytes.data`; returns the
// one response message. `rpc` names the call in errors.
absl::StatusOr<grpc::ByteBuffer> CallStreaming(grpc::GenericStub& stub, const std::string& method,
                                               absl::string_view rpc, std::string header,
                                               const StreamedBytes& bytes) {
  if (bytes.chunk_bytes == 0 || bytes.chunk_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk size ", bytes.chunk_bytes, " bytes is outside [1, 1 GiB]"));
  }
  const auto progress = [&](std::uint64_t sent) {
    if (bytes.progress != nullptr && *bytes.progress) (*bytes.progress)(sent, bytes.total);
  };
  CallQueue queue;
  grpc::ClientContext context;
  SetDeadline(context, bytes.timeout);
  // Client streaming has the same wire form as bidi streaming; the generic
  // stub only offers the latter. We read exactly one response.
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, queue.get());
  call->StartCall(queue.tag());
  bool ok = queue.Wait();
  if (ok) {
    call->Write(MessageWithBorrowedBytes(std::move(header), nullptr, 0), queue.tag());
    ok = queue.Wait();
  }
  progress(0);
  std::uint64_t sent = 0;
  while (ok && sent < bytes.total) {
    const std::uint64_t n = std::min(bytes.chunk_bytes, bytes.total - sent);
    call->Write(MessageWithBorrowedBytes(std::string(), bytes.data + sent, n), queue.tag());
    ok = queue.Wait();
    if (ok) {
      sent += n;
      progress(sent);
    }
  }
  // A failed write means the server has already ended the call (usually
  // with an error for the header): skip to its status.
  if (ok) {
    call->WritesDone(queue.tag());
    ok = queue.Wait();
  }
  grpc::ByteBuffer reply;
  bool have_reply = false;
  if (ok) {
    call->Read(&reply, queue.tag());
    have_reply = queue.Wait();
  }
  grpc::Status status;
  call->Finish(&status, queue.tag());
  queue.Wait();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!have_reply) {
    return absl::InternalError(absl::StrCat("the server ended ", rpc, " with OK but sent no response"));
  }
  return reply;
}

}  // namespace

absl::string_view ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing: return "SERVING";
    case ServingStatus::kNotServing: return "NOT_SERVING";
    case ServingStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown: break;
  }
  return "UNKNOWN";
}

bool UsesStream(const ArrayRef& array, const CallOptions& options) {
  switch (options.stream) {
    case StreamMode::kAlways: return true;
    case StreamMode::kNever: return false;
    case StreamMode::kAuto: break;
  }
  return array.size_bytes() > options.stream_threshold_bytes;
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(channel_) {}

bool Client::WaitForConnected(absl::Duration timeout) {
  return channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout));
}

absl::StatusOr<ServingStatus> Client::CheckHealth(absl::string_view service,
                                                  absl::Duration timeout) {
  absl::StatusOr<grpc::ByteBuffer> reply =
      CallUnary(stub_, "/grpc.health.v1.Health/Check", HealthCheckRequest(service), timeout);
  if (!reply.ok()) return reply.status();
  return ParseHealthCheckResponse(*reply);
}

namespace {

// Every message of a GroupBy answer merged into one, then the call's status.
template <typename Stream>
absl::StatusOr<v1::GroupByResponse> ReadGroupPages(Stream& stream) {
  v1::GroupByResponse all, page;
  absl::Status merged = absl::OkStatus();
  while (stream.Read(&page)) {
    if (merged.ok()) merged = MergeGroupPage(all, std::move(page));
    page.Clear();
  }
  const grpc::Status status = stream.Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!merged.ok()) return merged;
  return all;
}

// Each chunk of `bytes` as a GroupByStream message of `column`; false once
// the server has ended the call.
bool WriteChunks(grpc::ClientReaderWriter<v1::GroupByStreamRequest, v1::GroupByResponse>& stream,
                 std::uint32_t column, bool validity, const std::string& bytes, std::uint64_t chunk_bytes) {
  v1::GroupByStreamRequest m;
  m.set_column(column);
  m.set_validity(validity);
  for (std::uint64_t at = 0; at < bytes.size(); at += chunk_bytes) {
    m.mutable_chunk()->assign(bytes, at, chunk_bytes);
    if (!stream.Write(m)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<v1::GroupByResponse> Client::GroupBy(const v1::GroupByRequest& request, const CallOptions& options) {
  grpc::ClientContext context;
  SetDeadline(context, options.timeout);
  std::unique_ptr<v1::Aggregator::Stub> stub = v1::Aggregator::NewStub(channel_);
  const bool streamed = options.stream == StreamMode::kAlways ||
                        (options.stream == StreamMode::kAuto &&
                         InlineColumnBytes(request) > options.stream_threshold_bytes);
  if (!streamed) {
    std::unique_ptr<grpc::ClientReader<v1::GroupByResponse>> reader = stub->GroupBy(&context, request);
    return ReadGroupPages(*reader);
  }
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError("chunk_bytes must be > 0");
  absl::StatusOr<v1::GroupByStreamRequest> header = GroupByStreamHeader(request);
  if (!header.ok()) return header.status();
  auto stream = stub->GroupByStream(&context);
  bool open = stream->Write(*header);
  for (int i = 0; open && i < request.columns_size(); ++i) {
    const v1::Column& c = request.columns(i);
    if (!c.dataset().empty() || c.has_region()) continue;
    const auto column = static_cast<std::uint32_t>(i);
    open = WriteChunks(*stream, column, false, c.data(), options.chunk_bytes) &&
           WriteChunks(*stream, column, true, c.validity(), options.chunk_bytes);
  }
  stream->WritesDone();
  return ReadGroupPages(*stream);
}

absl::StatusOr<v1::AggregateResponse> Client::Aggregate(
    const ArrayRef& array, const std::vector<v1::Aggregation>& aggregations,
    const CallOptions& options) {
  if (array.data == nullptr && array.length != 0) {
    return absl::InvalidArgumentError("array has a length but no data");
  }
  return UsesStream(array, options) ? Stream(array, aggregations, options)
                                    : Unary(array, aggregations, options);
}

absl::StatusOr<v1::AggregateResponse> Client::Unary(
    const ArrayRef& array, const std::vector<v1::Aggregation>& aggregations,
    const CallOptions& options) {
  v1::AggregateRequest head;
  *head.mutable_spec() = SpecOf(array);
  head.mutable_aggregations()->Assign(aggregations.begin(), aggregations.end());
  const std::string head_bytes = head.SerializeAsString();
  const std::uint64_t total = array.size_bytes();
  if (total > kMaxMessageBytes - head_bytes.size() - 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "array of ", total, " bytes is too large for the unary Aggregate call (one message holds "
        "less than 2 GiB); stream it instead"));
  }
  const grpc::ByteBuffer request = MessageWithBorrowedBytes(head_bytes, array.data, total);

  if (options.progress) options.progress(0, total);
  absl::StatusOr<grpc::ByteBuffer> reply = CallUnary(stub_, AggregateMethod(), request, options.timeout);
  if (!reply.ok()) return reply.status();
  if (options.progress) options.progress(total, total);
  return ParseResponse<v1::AggregateResponse>(&*reply);
}

absl::StatusOr<v1::AggregateResponse> Client::Stream(
    const ArrayRef& array, const std::vector<v1::Aggregation>& aggregations,
    const CallOptions& options) {
  v1::AggregateStreamRequest header;
  *header.mutable_header()->mutable_spec() = SpecOf(array);
  header.mutable_header()->mutable_aggregations()->Assign(aggregations.begin(),
                                                          aggregations.end());
  absl::StatusOr<grpc::ByteBuffer> reply =
      CallStreaming(stub_, AggregateStreamMethod(), "AggregateStream", header.SerializeAsString(),
                    {array.data, array.size_bytes(), options.chunk_bytes, options.timeout,
                     &options.progress});
  if (!reply.ok()) return reply.status();
  return ParseResponse<v1::AggregateResponse>(&*reply);
}

absl::StatusOr<v1::PutDatasetResponse> Client::PutDataset(absl::string_view name,
                                                          const ArrayRef& array,
                                                          const PutOptions& options) {
  if (array.data == nullptr && array.length != 0) {
    return absl::InvalidArgumentError("array has a length but no data");
  }
  // The server would refuse these too, but only after the connection is up;
  // a local mistake should not look like a server's answer.
  if (options.ttl < absl::ZeroDuration() || options.ttl == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ttl ", absl::FormatDuration(options.ttl), " is not a finite duration >= 0"));
  }
  v1::PutDatasetRequest header;
  v1::PutDatasetRequest::Header* h = header.mutable_header();
  h->set_name(std::string(name));
  h->mutable_spec()->set_dtype(ToWire(array.dtype));
  h->mutable_spec()->set_length(array.length);
  h->mutable_spec()->set_row_length(array.row_length);
  h->set_replace(options.replace);
  h->set_ttl_seconds(absl::ToDoubleSeconds(options.ttl));
  absl::StatusOr<grpc::ByteBuffer> reply =
      CallStreaming(stub_, PutDatasetMethod(), "PutDataset", header.SerializeAsString(),
                    {array.data, array.size_bytes(), options.chunk_bytes, options.timeout,
                     &options.progress});
  if (!reply.ok()) return reply.status();
  return ParseResponse<v1::PutDatasetResponse>(&*reply);
}

absl::StatusOr<v1::AggregateResponse> Client::AggregateDataset(
    absl::string_view name, std::optional<ElementRange> range, std::optional<std::uint64_t> row_length,
    const std::vector<v1::Aggregation>& aggregations, absl::Duration timeout,
    std::span<const std::int64_t> offsets, std::span<const std::uint8_t> validity) {
  v1::AggregateDatasetRequest request;
  request.set_name(std::string(name));
  if (range) {
    request.mutable_range()->set_begin(range->begin);
    request.mutable_range()->set_end(range->end);
  }
  if (row_length) request.set_row_length(*row_length);
  request.set_offsets(reinterpret_cast<const char*>(offsets.data()), offsets.size_bytes());
  request.set_validity(reinterpret_cast<const char*>(validity.data()), validity.size_bytes());
  request.mutable_aggregations()->Assign(aggregations.begin(), aggregations.end());
  return CallMessage<v1::AggregateResponse>(stub_, AggregateDatasetMethod(), request, timeout);
}

absl::StatusOr<v1::ListDatasetsResponse> Client::ListDatasets(absl::Duration timeout) {
  v1::ListDatasetsResponse all;
  std::string token;
  do {
    absl::StatusOr<v1::ListDatasetsResponse> page = ListDatasetsPage(0, token, timeout);
    if (!page.ok()) return page.status();
    for (v1::DatasetInfo& d : *page->mutable_datasets()) *all.add_datasets() = std::move(d);
    // Each page tells every place's usage; the last one's is the newest.
    *all.mutable_places() = std::move(*page->mutable_places());
    token = page->next_page_token();
  } while (!token.empty());
  return all;
}

absl::StatusOr<v1::ListDatasetsResponse> Client::ListDatasetsPage(std::uint32_t page_size,
                                                                  absl::string_view page_token,
                                                                  absl::Duration timeout) {
  v1::ListDatasetsRequest request;
  request.set_page_size(page_size);
  request.set_page_token(std::string(page_token));
  return CallMessage<v1::ListDatasetsResponse>(stub_, ListDatasetsMethod(), request, timeout);
}

absl::StatusOr<v1::DatasetInfo> Client::DescribeDataset(absl::string_view name,
                                                        absl::Duration timeout) {
  v1::DescribeDatasetRequest request;
  request.set_name(std::string(name));
  return CallMessage<v1::DatasetInfo>(stub_, DescribeDatasetMethod(), request, timeout);
}

absl::StatusOr<v1::DatasetInfo> Client::DeleteDataset(absl::string_view name,
                                                      absl::Duration timeout) {
  v1::DeleteDatasetRequest request;
  request.set_name(std::string(name));
  absl::StatusOr<v1::DeleteDatasetResponse> response =
      CallMessage<v1::DeleteDatasetResponse>(stub_, DeleteDatasetMethod(), request, timeout);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_dataset());
}

absl::StatusOr<v1::RegionInfo> Client::RegisterHostRegion(absl::string_view name, absl::string_view shm_name,
                                                          std::uint64_t offset, std::uint64_t byte_size,
                                                          absl::Duration timeout) {
  v1::RegisterHostRegionRequest request;
  request.set_name(std::string(name));
  request.set_shm_name(std::string(shm_name));
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  return CallMessage<v1::RegionInfo>(stub_, SharedMemoryMethod(RegionCall::kRegisterHostRegion), request, timeout);
}

absl::StatusOr<v1::RegionInfo> Client::RegisterCudaRegion(absl::string_view name, absl::string_view ipc_handle,
                                                          int device, std::uint64_t byte_size,
                                                          absl::Duration timeout) {
  v1::RegisterCudaRegionRequest request;
  request.set_name(std::string(name));
  request.set_ipc_handle(std::string(ipc_handle));
  request.set_device(device);
  request.set_byte_size(byte_size);
  return CallMessage<v1::RegionInfo>(stub_, SharedMemoryMethod(RegionCall::kRegisterCudaRegion), request, timeout);
}

absl::StatusOr<v1::RegionInfo> Client::UnregisterRegion(absl::string_view name, absl::Duration timeout) {
  v1::UnregisterRegionRequest request;
  request.set_name(std::string(name));
  return CallMessage<v1::RegionInfo>(stub_, SharedMemoryMethod(RegionCall::kUnregisterRegion), request, timeout);
}

absl::StatusOr<v1::ListRegionsResponse> Client::ListRegions(absl::Duration timeout) {
  return CallMessage<v1::ListRegionsResponse>(stub_, SharedMemoryMethod(RegionCall::kListRegions), v1::ListRegionsRequest(),
                                              timeout);
}

absl::StatusOr<v1::AggregateResponse> Client::AggregateRegion(absl::string_view region, std::uint64_t offset,
                                                              const v1::ArraySpec& spec,
                                                              const std::vector<v1::Aggregation>& aggregations,
                                                              absl::Duration timeout) {
  v1::AggregateRegionRequest request;
  request.set_region(std::string(region));
  request.set_offset(offset);
  *request.mutable_spec() = spec;
  request.mutable_aggregations()->Assign(aggregations.begin(), aggregations.end());
  return CallMessage<v1::AggregateResponse>(stub_, SharedMemoryMethod(RegionCall::kAggregateRegion), request, timeout);
}

absl::StatusOr<v1::PutDatasetResponse> Client::PutDatasetFromRegion(absl::string_view name, absl::string_view region,
                                                                    std::uint64_t offset, v1::DType dtype,
                                                                    std::uint64_t length, const PutOptions& options) {
  v1::PutDatasetFromRegionRequest request;
  v1::PutDatasetRequest::Header* header = request.mutable_dataset();
  header->set_name(std::string(name));
  header->mutable_spec()->set_dtype(dtype);
  header->mutable_spec()->set_length(length);
  header->set_replace(options.replace);
  header->set_ttl_seconds(absl::ToDoubleSeconds(options.ttl));
  request.set_region(std::string(region));
  request.set_offset(offset);
  return CallMessage<v1::PutDatasetResponse>(stub_, SharedMemoryMethod(RegionCall::kPutDatasetFromRegion), request,
                                             options.timeout);
}

}  // namespace tally::client
