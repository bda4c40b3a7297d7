// GroupByStream against GroupBy: a table sent in chunks answers what the
// same table in one message answers, bit for bit, whatever the chunking
// (elements split between chunks, columns interleaved, masks in chunks,
// dataset columns beside streamed ones); a bad stream is refused naming the
// field, and the server carries on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "server_fixture.h"
#include "tally/client/client.h"

namespace tally::testing {
namespace {

using Pages = std::vector<v1::GroupByResponse>;

// A table of `rows` rows: an int32 key of few values and a float key with
// NaN and -0.0 (for composite keys), float64 values with NaN, int16 values
// with a validity mask.
struct Table {
  std::string k, f, v, w, w_valid;
  std::uint64_t rows = 0;
};

Table MakeTable(std::uint64_t rows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> k(rows);
  std::vector<float> f(rows);
  std::vector<double> v(rows);
  std::vector<std::int16_t> w(rows);
  std::string valid((rows + 7) / 8, '\0');
  for (std::uint64_t i = 0; i < rows; ++i) {
    k[i] = static_cast<std::int32_t>(rng() % 37) - 9;
    const int fk = static_cast<int>(rng() % 5);
    f[i] = fk == 0 ? std::numeric_limits<float>::quiet_NaN() : fk == 1 ? -0.0f : static_cast<float>(fk);
    v[i] = rng() % 11 == 0 ? std::nan("") : std::ldexp(static_cast<double>(rng() % 100000), -7) - 300.0;
    w[i] = static_cast<std::int16_t>(rng() % 2001) - 1000;
    if (rng() % 5 != 0) valid[i / 8] = static_cast<char>(valid[i / 8] | (1 << (i % 8)));
  }
  return Table{Bytes(k), Bytes(f), Bytes(v), Bytes(w), valid, rows};
}

v1::Column ColumnOf(const std::string& name, v1::DType dtype) {
  v1::Column c;
  c.set_name(name);
  c.set_dtype(dtype);
  return c;
}

// The request without its columns' bytes: keys k (and f when composite),
// aggregations of v and w.
v1::GroupByRequest Request(bool composite, std::uint64_t groups_per_message) {
  v1::GroupByRequest r;
  *r.add_columns() = ColumnOf("k", v1::DTYPE_INT32);
  *r.add_columns() = ColumnOf("f", v1::DTYPE_FLOAT32);
  *r.add_columns() = ColumnOf("v", v1::DTYPE_FLOAT64);
  *r.add_columns() = ColumnOf("w", v1::DTYPE_INT16);
  r.add_keys("k");
  if (composite) r.add_keys("f");
  for (const v1::Op op :
       {v1::OP_NANSUM, v1::OP_MEAN, v1::OP_NANVAR, v1::OP_NANMIN, v1::OP_ARGMAX, v1::OP_COUNT, v1::OP_NANMEDIAN}) {
    v1::GroupAggregation* a = r.add_aggregations();
    a->set_column("v");
    *a->mutable_aggregation() = Op(op);
    if (op == v1::OP_NANVAR) a->mutable_aggregation()->set_ddof(1);
  }
  for (const v1::Op op : {v1::OP_SUM, v1::OP_MEAN, v1::OP_COUNT}) {
    v1::GroupAggregation* a = r.add_aggregations();
    a->set_column("w");
    *a->mutable_aggregation() = Op(op);
  }
  r.set_keep_na_keys(true);
  r.set_groups_per_message(groups_per_message);
  return r;
}

v1::GroupByStreamRequest ColumnChunk(std::uint32_t column, std::string bytes, bool validity = false) {
  v1::GroupByStreamRequest m;
  m.set_column(column);
  m.set_chunk(std::move(bytes));
  m.set_validity(validity);
  return m;
}

v1::GroupByStreamRequest TableHeader(const v1::GroupByRequest& request, std::uint64_t rows,
                                     std::vector<std::uint32_t> masked = {}) {
  v1::GroupByStreamRequest m;
  *m.mutable_header()->mutable_request() = request;
  m.mutable_header()->set_rows(rows);
  for (const std::uint32_t i : masked) m.mutable_header()->add_masked_columns(i);
  return m;
}

// Each part's bytes cut into chunks of 1 to `most` bytes, the parts'
// chunks interleaved at random (each part's in order).
struct Part {
  std::uint32_t column;
  bool validity;
  const std::string* bytes;
};
std::vector<v1::GroupByStreamRequest> Interleaved(const std::vector<Part>& parts, std::uint64_t most,
                                                  std::mt19937_64& rng) {
  std::vector<std::uint64_t> at(parts.size(), 0);
  std::vector<v1::GroupByStreamRequest> out;
  for (;;) {
    std::vector<std::size_t> open;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      if (at[p] < parts[p].bytes->size()) open.push_back(p);
    }
    if (open.empty()) return out;
    const std::size_t p = open[rng() % open.size()];
    const std::uint64_t n = std::min<std::uint64_t>(1 + rng() % most, parts[p].bytes->size() - at[p]);
    out.push_back(ColumnChunk(parts[p].column, parts[p].bytes->substr(at[p], n), parts[p].validity));
    at[p] += n;
  }
}

class GroupByStreamTest : public ServerFixture {
 protected:
  grpc::Status GroupBy(const v1::GroupByRequest& request, Pages* pages) {
    grpc::ClientContext ctx;
    auto reader = stub_->GroupBy(&ctx, request);
    for (v1::GroupByResponse page; reader->Read(&page);) pages->push_back(page);
    return reader->Finish();
  }

  grpc::Status Streamed(const std::vector<v1::GroupByStreamRequest>& messages, Pages* pages) {
    grpc::ClientContext ctx;
    auto stream = stub_->GroupByStream(&ctx);
    for (const auto& m : messages) {
      if (!stream->Write(m)) break;  // the server has answered already
    }
    stream->WritesDone();
    for (v1::GroupByResponse page; stream->Read(&page);) pages->push_back(page);
    return stream->Finish();
  }

  // The error of a stream of `messages`; its message must hold `why`.
  void ExpectRefused(const std::vector<v1::GroupByStreamRequest>& messages, grpc::StatusCode code,
                     const std::string& why) {
    Pages pages;
    const grpc::Status s = Streamed(messages, &pages);
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(why), std::string::npos) << s.error_message() << "\n(wanted: " << why << ")";
  }

  static void ExpectSamePages(Pages got, Pages want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t p = 0; p < got.size(); ++p) {
      // Both say how long they took; the rest is the same bits.
      EXPECT_GT(got[p].has_execution() ? got[p].execution().elements() : 1, 0u) << what;
      got[p].mutable_execution()->clear_server_seconds();
      want[p].mutable_execution()->clear_server_seconds();
      EXPECT_EQ(got[p].SerializeAsString(), want[p].SerializeAsString()) << what << ", page " << p;
    }
  }
};

TEST_F(GroupByStreamTest, AnyChunkingAnswersAsOneMessage) {
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t seed = rng();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const std::uint64_t rows : {std::uint64_t{1}, std::uint64_t{13}, std::uint64_t{40001}}) {
    const Table t = MakeTable(rows, seed + rows);
    for (const bool composite : {false, true}) {
      const v1::GroupByRequest bare = Request(composite, /*groups_per_message=*/7);
      v1::GroupByRequest whole = bare;
      whole.mutable_columns(0)->set_data(t.k);
      whole.mutable_columns(1)->set_data(t.f);
      whole.mutable_columns(2)->set_data(t.v);
      whole.mutable_columns(3)->set_data(t.w);
      whole.mutable_columns(3)->set_validity(t.w_valid);
      Pages want;
      const grpc::Status one = GroupBy(whole, &want);
      ASSERT_TRUE(one.ok()) << "rows " << rows << ": " << one.error_message();
      ASSERT_GE(want.size(), rows > 100 ? 2u : 1u);  // several pages

      const std::vector<Part> parts = {
          {0, false, &t.k}, {1, false, &t.f}, {2, false, &t.v}, {3, false, &t.w}, {3, true, &t.w_valid}};
      // Each column whole, one after another; then chunks of a few bytes
      // (elements split), of a few KB, interleaved.
      for (const std::uint64_t most : {std::uint64_t{0}, std::uint64_t{7}, std::uint64_t{5000}}) {
        std::vector<v1::GroupByStreamRequest> messages = {TableHeader(bare, rows, {3})};
        if (most == 0) {
          for (const Part& p : parts) messages.push_back(ColumnChunk(p.column, *p.bytes, p.validity));
        } else {
          for (auto& m : Interleaved(parts, most, rng)) messages.push_back(std::move(m));
        }
        Pages got;
        const grpc::Status s = Streamed(messages, &got);
        ASSERT_TRUE(s.ok()) << s.error_message();
        ExpectSamePages(got, want,
                        "rows " + std::to_string(rows) + (composite ? ", composite" : "") + ", chunks of at most " +
                            std::to_string(most) + " bytes (" + std::to_string(messages.size() - 1) + " chunks)");
      }
    }
  }
}

TEST_F(GroupByStreamTest, DatasetColumnsJoinStreamedOnes) {
  const Table t = MakeTable(20000, 7);
  {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse response;
    auto writer = stub_->PutDataset(&ctx, &response);
    v1::PutDatasetRequest header;
    header.mutable_header()->set_name("keys");
    header.mutable_header()->mutable_spec()->set_dtype(v1::DTYPE_INT32);
    header.mutable_header()->mutable_spec()->set_length(t.rows);
    ASSERT_TRUE(writer->Write(header));
    v1::PutDatasetRequest chunk;
    chunk.set_chunk(t.k);
    ASSERT_TRUE(writer->Write(chunk));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
  }
  v1::GroupByRequest bare = Request(false, 0);
  v1::GroupByRequest whole = bare;
  whole.mutable_columns(0)->set_data(t.k);
  whole.mutable_columns(1)->set_data(t.f);
  whole.mutable_columns(2)->set_data(t.v);
  whole.mutable_columns(3)->set_data(t.w);
  Pages want;
  ASSERT_TRUE(GroupBy(whole, &want).ok());

  v1::GroupByRequest mixed = bare;
  mixed.mutable_columns(0)->set_dtype(v1::DTYPE_UNSPECIFIED);
  mixed.mutable_columns(0)->set_dataset("keys");
  Pages got;
  const grpc::Status s =
      Streamed({TableHeader(mixed, t.rows), ColumnChunk(2, t.v), ColumnChunk(1, t.f), ColumnChunk(3, t.w)}, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectSamePages(got, want, "keys from a dataset");
  // A dataset column has no chunks, and its length is the table's.
  ExpectRefused({TableHeader(mixed, t.rows), ColumnChunk(0, t.k)}, grpc::StatusCode::INVALID_ARGUMENT,
                "column: 0 is not a streamed column");
  ExpectRefused({TableHeader(mixed, t.rows - 1), ColumnChunk(1, t.f.substr(4)), ColumnChunk(2, t.v.substr(8)),
                 ColumnChunk(3, t.w.substr(2))},
                grpc::StatusCode::INVALID_ARGUMENT, "every column must have the same length");
}

TEST_F(GroupByStreamTest, AnEmptyTableAnswersNoGroups) {
  v1::GroupByRequest r;
  *r.add_columns() = ColumnOf("k", v1::DTYPE_INT64);
  *r.add_columns() = ColumnOf("v", v1::DTYPE_FLOAT32);
  r.add_keys("k");
  v1::GroupAggregation* a = r.add_aggregations();
  a->set_column("v");
  *a->mutable_aggregation() = Op(v1::OP_SUM);
  Pages pages;
  const grpc::Status s = Streamed({TableHeader(r, 0)}, &pages);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(pages.size(), 1u);
  EXPECT_EQ(pages[0].groups(), 0u);
  EXPECT_EQ(pages[0].execution().elements(), 0u);
}

TEST_F(GroupByStreamTest, BadStreamsAreRefusedNamingTheFieldAndTheServerCarriesOn) {
  const Table t = MakeTable(1000, 3);
  const v1::GroupByRequest bare = Request(false, 0);
  const auto whole = [&](std::uint64_t rows) {
    return std::vector<v1::GroupByStreamRequest>{TableHeader(bare, rows), ColumnChunk(0, t.k), ColumnChunk(1, t.f),
                                                 ColumnChunk(2, t.v), ColumnChunk(3, t.w)};
  };
  using grpc::StatusCode;
  ExpectRefused({ColumnChunk(0, t.k)}, StatusCode::INVALID_ARGUMENT,
                "first message of GroupByStream must be the header");
  {
    v1::GroupByRequest r = bare;
    r.mutable_columns(2)->set_data("12345678");
    ExpectRefused({TableHeader(r, t.rows)}, StatusCode::INVALID_ARGUMENT, "header.request.columns[2].data");
    r = bare;
    r.mutable_columns(3)->set_validity(t.w_valid);
    ExpectRefused({TableHeader(r, t.rows)}, StatusCode::INVALID_ARGUMENT, "list the column in header.masked_columns");
    r = bare;
    r.mutable_columns(1)->set_dtype(v1::DTYPE_UNSPECIFIED);
    ExpectRefused({TableHeader(r, t.rows)}, StatusCode::INVALID_ARGUMENT, "header.request.columns[1].dtype");
  }
  ExpectRefused({TableHeader(bare, t.rows, {9})}, StatusCode::INVALID_ARGUMENT, "header.masked_columns[0]: 9");
  ExpectRefused({TableHeader(bare, t.rows, {3, 3})}, StatusCode::INVALID_ARGUMENT, "header.masked_columns[1]: 3");
  ExpectRefused({TableHeader(bare, t.rows), ColumnChunk(4, "x")}, StatusCode::INVALID_ARGUMENT,
                "column: 4 is not a streamed column");
  ExpectRefused({TableHeader(bare, t.rows), ColumnChunk(2, t.v + "x")}, StatusCode::INVALID_ARGUMENT,
                "column 2 ('v') sent more than its 8000 bytes");
  ExpectRefused({TableHeader(bare, t.rows), ColumnChunk(3, t.w_valid, true)}, StatusCode::INVALID_ARGUMENT,
                "validity: column 3 ('w') is not in header.masked_columns");
  ExpectRefused({TableHeader(bare, t.rows, {3}), ColumnChunk(3, t.w_valid + "x", true)}, StatusCode::INVALID_ARGUMENT,
                "sent more than its 125 validity bytes");
  std::vector<v1::GroupByStreamRequest> early = whole(t.rows);
  early.pop_back();
  ExpectRefused(early, StatusCode::INVALID_ARGUMENT, "the stream ended early");
  std::vector<v1::GroupByStreamRequest> twice = whole(t.rows);
  twice.insert(twice.begin() + 2, TableHeader(bare, t.rows));
  ExpectRefused(twice, StatusCode::INVALID_ARGUMENT, "a stream carries one header");
  {
    // The plan's own checks, at the first chunk: as GroupBy names them.
    v1::GroupByRequest r = bare;
    r.mutable_aggregations(0)->set_column("nope");
    ExpectRefused({TableHeader(r, t.rows), ColumnChunk(0, t.k)}, StatusCode::INVALID_ARGUMENT,
                  "aggregations[0].column: no column is named 'nope'");
    r = bare;
    r.set_keys(0, "gone");
    ExpectRefused({TableHeader(r, t.rows), ColumnChunk(0, t.k)}, StatusCode::INVALID_ARGUMENT,
                  "keys[0]: no column is named 'gone'");
  }
  // The server carries on.
  Pages pages;
  const grpc::Status s = Streamed(whole(t.rows), &pages);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(pages.back().execution().elements(), t.rows);
}

TEST_F(GroupByStreamTest, ATablePastTheInflightBudgetIsRefusedAtItsHeader) {
  ServerConfig config;
  config.service.max_inflight_bytes = std::uint64_t{1} << 20;
  server_.reset();
  StartServer(config);
  const v1::GroupByRequest bare = Request(false, 0);
  // 18 bytes of columns and 20 of working memory a row: 27,594 rows fit
  // 1 MiB, 27,595 do not.
  ExpectRefused({TableHeader(bare, 27595)}, grpc::StatusCode::RESOURCE_EXHAUSTED,
                "past --max_inflight_bytes (1048576)");
  const Table t = MakeTable(27594, 5);
  Pages pages;
  const grpc::Status s = Streamed(
      {TableHeader(bare, t.rows), ColumnChunk(0, t.k), ColumnChunk(1, t.f), ColumnChunk(2, t.v), ColumnChunk(3, t.w)},
      &pages);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // With no budget (0), a table no host holds is refused when its first
  // chunk asks for the memory, and one past 64-bit sizes at its header.
  config.service.max_inflight_bytes = 0;
  server_.reset();
  StartServer(config);
  ExpectRefused({TableHeader(bare, std::uint64_t{1} << 58), ColumnChunk(0, "abcd")},
                grpc::StatusCode::RESOURCE_EXHAUSTED, "the server's host has no room for a column of");
  ExpectRefused({TableHeader(bare, std::uint64_t{1} << 61)}, grpc::StatusCode::INVALID_ARGUMENT,
                "header.rows: too many rows");
}

// A stream that stops sending, or is cancelled, is ended and what it held
// (its table, its share of --max_inflight_bytes) freed.
TEST_F(GroupByStreamTest, AStalledOrCancelledStreamFreesItsTable) {
  ServerConfig config;
  config.service.stream_idle_timeout = std::chrono::milliseconds(300);
  server_.reset();
  StartServer(config);
  const Table t = MakeTable(100000, 13);
  const v1::GroupByRequest bare = Request(false, 0);
  for (const bool cancel : {false, true}) {
    SCOPED_TRACE(cancel ? "cancelled" : "stalled");
    grpc::ClientContext ctx;
    auto stream = stub_->GroupByStream(&ctx);
    ASSERT_TRUE(stream->Write(TableHeader(bare, t.rows)));
    ASSERT_TRUE(stream->Write(ColumnChunk(2, t.v)));                              // 800 KB of the table, then nothing
    ASSERT_TRUE(MetricReaches("tally_in_flight_bytes", 800000 + 20.0 * t.rows));  // kept, with the working bytes
    if (cancel) ctx.TryCancel();
    v1::GroupByResponse page;
    EXPECT_FALSE(stream->Read(&page));
    const grpc::Status s = stream->Finish();
    if (cancel) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
      EXPECT_NE(s.error_message().find("--stream_idle_timeout_ms"), std::string::npos) << s.error_message();
    }
    EXPECT_TRUE(MetricReaches("tally_in_flight_bytes", 0));
    EXPECT_TRUE(MetricReaches("tally_requests_in_flight", 0));
  }
}

// The C++ client sends a request of more than stream_threshold_bytes with
// GroupByStream, and gets the answer the one message gets.
TEST_F(GroupByStreamTest, TheClientStreamsALargeRequestAndGetsTheSameAnswer) {
  const Table t = MakeTable(30000, 11);
  v1::GroupByRequest whole = Request(true, 100);
  whole.mutable_columns(0)->set_data(t.k);
  whole.mutable_columns(1)->set_data(t.f);
  whole.mutable_columns(2)->set_data(t.v);
  whole.mutable_columns(3)->set_data(t.w);
  whole.mutable_columns(3)->set_validity(t.w_valid);
  client::Client client(channel_);
  absl::StatusOr<v1::GroupByResponse> one = client.GroupBy(whole, {.stream = client::StreamMode::kNever});
  ASSERT_TRUE(one.ok()) << one.status();
  client::CallOptions streamed{.stream_threshold_bytes = 1000, .chunk_bytes = 999};
  absl::StatusOr<v1::GroupByResponse> got = client.GroupBy(whole, streamed);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_GT(one->groups(), 100u);  // from several pages
  got->mutable_execution()->clear_server_seconds();
  one->mutable_execution()->clear_server_seconds();
  EXPECT_EQ(got->SerializeAsString(), one->SerializeAsString());
  // Columns of different lengths are named before anything is sent.
  whole.mutable_columns(2)->mutable_data()->resize(8 * 29999);
  absl::StatusOr<v1::GroupByResponse> bad = client.GroupBy(whole, streamed);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("columns[2] 'v': 29999 rows, but columns[0] 'k' has 30000"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace tally::testing
