// GroupByStream: a group-by table whose columns arrive in chunks. The
// header names the columns, keys and aggregations and says how many rows
// the streamed columns hold; nothing is reserved until the first chunk,
// which starts the job: the table's host memory is taken then and the plan
// checked. Each chunk is copied into its column where the last one ended,
// and its bytes stay charged to --max_inflight_bytes until the call ends;
// once the client closes its side the table is whole and is grouped as
// GroupBy groups one message's (group_by_columns.h), so a chunking never
// changes an answer.
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "server/frontend/aggregator_service.h"
#include "server/frontend/call_parts.h"
#include "server/frontend/convert.h"
#include "server/frontend/group_by_columns.h"

namespace tally {

class AggregatorService::GroupByStreamJob final : public StreamJob {
 public:
  explicit GroupByStreamJob(AggregatorService& service) : service_(service) {}

  absl::StatusOr<StreamChunk> Parse(const grpc::ByteBuffer& raw, bool* is_header) override {
    absl::StatusOr<SlicedBytes> chunk =
        ParseStreamMessage(raw, v1::GroupByStreamRequest::kChunkFieldNumber, &message_, is_header);
    if (!chunk.ok()) return chunk.status();
    if (*is_header || !header_taken_) return StreamChunk{.bytes = *std::move(chunk)};
    // A chunk after the header: its column must be streamed, and the bytes
    // must fit what the header said that column (or its mask) holds.
    const std::uint32_t column = message_.column();
    if (column >= columns_.size() || !columns_[column].streamed) {
      return absl::InvalidArgumentError(
          absl::StrCat("column: ", column, " is not a streamed column of the header (header.request.columns has ",
                       columns_.size(), "; a column with a dataset or a region has no chunks)."));
    }
    if (message_.validity() && !columns_[column].masked) {
      return absl::InvalidArgumentError(absl::StrCat("validity: column ", column, " ('", columns_[column].name,
                                                     "') is not in header.masked_columns, so it has no "
                                                     "validity chunks."));
    }
    const std::uint32_t part = 2 * column + (message_.validity() ? 1 : 0);
    Part& p = parts_[part];
    if (chunk->size() > p.bytes - p.parsed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk: column ", column, " ('", columns_[column].name, "') sent more than its ", p.bytes,
          message_.validity() ? " validity bytes (ceil(header.rows / 8))" : " bytes (header.rows elements)", "."));
    }
    p.parsed += chunk->size();
    return StreamChunk{.bytes = *std::move(chunk), .part = part};
  }

  absl::Status TakeHeader() override {
    if (message_.payload_case() != v1::GroupByStreamRequest::kHeader) {
      return absl::InvalidArgumentError(
          "chunk: the first message of GroupByStream must be the header (the table's columns, keys and "
          "aggregations), not a chunk.");
    }
    header_ = std::move(*message_.mutable_header());
    header_taken_ = true;
    const v1::GroupByRequest& request = header_.request();
    const std::uint64_t rows = header_.rows();
    columns_.resize(static_cast<std::size_t>(request.columns_size()));
    parts_.resize(2 * columns_.size());
    absl::uint128 table = 0;
    for (int i = 0; i < request.columns_size(); ++i) {
      const v1::Column& c = request.columns(i);
      if (!c.dataset().empty() || c.has_region()) continue;
      const std::string field = absl::StrCat("header.request.columns[", i, "]");
      if (!c.data().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".data: a streamed column's elements come in chunks, not in the header."));
      }
      if (!c.validity().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field,
                         ".validity: a streamed column's validity comes in chunks; list the column in "
                         "header.masked_columns."));
      }
      absl::StatusOr<DType> dtype = DTypeFromProto(c.dtype());
      if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: ", dtype.status().message()));
      Column& column = columns_[static_cast<std::size_t>(i)];
      column.streamed = true;
      column.name = c.name();
      column.dtype = *dtype;
      parts_[2 * static_cast<std::size_t>(i)].bytes = rows * rules::SizeOf(*dtype);
      table += absl::uint128(rows) * rules::SizeOf(*dtype);
    }
    for (int j = 0; j < header_.masked_columns_size(); ++j) {
      const std::uint32_t i = header_.masked_columns(j);
      if (i >= columns_.size() || !columns_[i].streamed || columns_[i].masked) {
        return absl::InvalidArgumentError(absl::StrCat(
            "header.masked_columns[", j, "]: ", i, " is not a streamed column, or is listed twice (", columns_.size(),
            " columns; a column with a dataset or a region gives its validity in the header)."));
      }
      columns_[i].masked = true;
      parts_[2 * i + 1].bytes = rows / 8 + (rows % 8 != 0 ? 1 : 0);
      table += parts_[2 * i + 1].bytes;
    }
    absl::StatusOr<StoredColumns> stored = HoldStoredColumns(request, service_.datasets_, service_.regions_);
    if (!stored.ok()) return stored.status();
    stored_ = *std::move(stored);
    const absl::uint128 held =
        table + stored_.to_copy + absl::uint128(rows) * GroupByWorkingBytes(1, request.keys_size());
    const std::uint64_t budget = service_.options_.max_inflight_bytes;
    if (budget != 0 && held > budget) {
      // The Python client reads the two figures to cut such a table into
      // parts (_groupby.py, _PAST_BUDGET): keep them as they are written.
      return absl::ResourceExhaustedError(
          absl::StrCat("header.rows: a streamed table of ", rows, " rows holds ", absl::Uint128Low64(held),
                       " bytes while it is grouped (its columns, and ", GroupByWorkingBytes(1, request.keys_size()),
                       " bytes a row), past --max_inflight_bytes (", budget,
                       "); send fewer rows per request and merge their partial states, or raise the flag."));
    }
    if (absl::Uint128High64(held) != 0) return absl::InvalidArgumentError("header.rows: too many rows.");
    declared_ = absl::Uint128Low64(table);
    held_ = absl::Uint128Low64(held);
    return absl::OkStatus();
  }

  std::uint64_t declared_bytes() const override { return declared_; }
  std::string Declared() const override {
    return absl::StrCat("the header (header.rows ", header_.rows(), " of its streamed columns)");
  }
  // From the first chunk to the end: the copies of its sharded columns and
  // the grouping's working memory. The table's own bytes are each chunk's,
  // kept once copied in, so what the call holds grows as they arrive (the
  // table's pages are touched only as they are written).
  std::uint64_t result_bytes() const override { return held_ - declared_; }
  bool KeepsChunkBytes() const override { return true; }
  std::vector<rules::OpKind> ops() const override { return ops_; }

  // The table's memory, once bytes arrive, and the plan checked (the masks
  // still zeros: it is made again once they have arrived).
  absl::Status Start() override {
    v1::GroupByRequest& request = *header_.mutable_request();
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      Column& c = columns_[i];
      if (!c.streamed) continue;
      // The host may not have it (--max_inflight_bytes 0 sets no bound).
      const std::uint64_t bytes = parts_[2 * i].bytes;
      c.data.reset(new (std::nothrow) std::byte[bytes]);
      if (c.data == nullptr && bytes > 0) return NoRoom(bytes);
      stored_.bytes[i] = ColumnBytes{.dtype = c.dtype, .data = std::span<const std::byte>(c.data.get(), bytes)};
      if (c.masked) {
        std::string& mask = *request.mutable_columns(static_cast<int>(i))->mutable_validity();
        try {
          mask.assign(parts_[2 * i + 1].bytes, '\0');
        } catch (const std::bad_alloc&) {
          return NoRoom(parts_[2 * i + 1].bytes);
        }
      }
    }
    absl::StatusOr<GroupByPlan> plan = GroupByPlanFromProto(request, stored_.bytes, service_.options_.limits);
    if (!plan.ok()) return plan.status();
    return absl::OkStatus();
  }

  absl::Status Consume(const StreamChunk& chunk) override {
    Part& p = parts_[chunk.part];
    const std::size_t column = chunk.part / 2;
    std::byte* to =
        chunk.part % 2 == 0
            ? columns_[column].data.get()
            : reinterpret_cast<std::byte*>(
                  header_.mutable_request()->mutable_columns(static_cast<int>(column))->mutable_validity()->data());
    for (const std::span<const std::byte> piece : chunk.bytes.pieces()) {
      std::memcpy(to + p.consumed, piece.data(), piece.size());
      p.consumed += piece.size();
    }
    return absl::OkStatus();
  }

  // Grouping a whole table takes a while: on a chunk worker.
  bool FinishMayWait() const override { return true; }

  absl::Status Finish(double server_seconds, grpc::ByteBuffer* response) override {
    const v1::GroupByRequest& request = header_.request();
    if (absl::Status s = CopyShardedColumns(stored_, service_.backend_); !s.ok()) return s;
    absl::StatusOr<GroupedTable> table = GroupTable(
        request, stored_, service_.backend_, service_.options_.limits, service_.options_.max_groups,
        [this](std::vector<rules::OpKind> ops) { ops_ = std::move(ops); }, nullptr);
    if (!table.ok()) return table.status();
    if (service_.metrics_ != nullptr) {
      service_.metrics_->GroupedBy(table->result.on_device, table->plan.rows, table->result.groups);
    }
    rows_ = table->plan.rows;
    // The answer holds its own values: the table goes (the plan's spans
    // into it are not read again).
    stored_.copies.clear();
    for (Column& c : columns_) c.data.reset();
    pages_.emplace(request, *std::move(table), server_seconds);
    absl::StatusOr<bool> first = NextMessage(response);
    return first.status();
  }

  absl::StatusOr<bool> NextMessage(grpc::ByteBuffer* message) override {
    if (!pages_->Next(&page_)) return false;
    if (absl::Status s = SerializeResponse(page_, message); !s.ok()) return s;
    return true;
  }

  std::uint64_t elements() const override { return rows_; }

 private:
  static absl::Status NoRoom(std::uint64_t bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("header.rows: the server's host has no room for a column of ",
                                                     bytes, " bytes of the streamed table."));
  }

  struct Column {
    std::string name;  // for messages, read on the gRPC thread
    bool streamed = false;
    bool masked = false;
    DType dtype = DType::kFloat64;
    std::unique_ptr<std::byte[]> data;  // from Start(), until grouped
  };
  // A streamed column's elements (part 2i) or validity (2i + 1): the bytes
  // the header declared, those parsed (gRPC thread) and those copied in
  // (chunk worker).
  struct Part {
    std::uint64_t bytes = 0;
    std::uint64_t parsed = 0;
    std::uint64_t consumed = 0;
  };

  AggregatorService& service_;
  v1::GroupByStreamRequest message_;
  v1::GroupByStreamRequest::Header header_;  // masks are assembled in its columns' validity
  std::vector<Column> columns_;
  std::vector<Part> parts_;
  StoredColumns stored_;
  bool header_taken_ = false;
  std::uint64_t declared_ = 0;
  std::uint64_t held_ = 0;
  std::vector<rules::OpKind> ops_;
  std::uint64_t rows_ = 0;
  std::optional<GroupPages> pages_;
  v1::GroupByResponse page_;
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* AggregatorService::GroupByStream(
    grpc::CallbackServerContext* context) {
  StreamStart start = BeginStream(*context, Metrics::Method::kGroupByStream);
  return new PagedStreamReactor(std::make_unique<GroupByStreamJob>(*this), StreamOptions(), context,
                                std::move(start.record), std::move(start.caller), start.refusal);
}

}  // namespace tally
