// The dataset store over the cpu backend: names, uploads that must leave
// nothing behind, replacement under readers, the byte budget, LRU eviction,
// expiry, and memory that goes only when its last reader does.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/datasets/dataset_store.h"
#include "tests/unit/test_seed.h"

namespace tally {
namespace {

using std::chrono::milliseconds;

constexpr std::uint64_t kO = DatasetStore::kOverheadBytes;  // what each dataset is charged beyond its bytes

std::vector<float> Random(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::span<const std::byte> AsBytes(const std::vector<float>& v) {
  return std::as_bytes(std::span<const float>(v));
}

class DatasetStoreTest : public ::testing::Test {
 protected:
  void Make(DatasetOptions options = {}) {
    options.sweep_interval = milliseconds(20);
    store_ = std::make_unique<DatasetStore>(*backend_, options, nullptr);
  }
  void SetUp() override { Make(); }

  // Uploads `v` in pieces of 1000 bytes (an element split across pieces
  // too) and commits.
  absl::StatusOr<DatasetInfo> Put(const std::string& name, const std::vector<float>& v, bool replace = false,
                                  std::optional<milliseconds> ttl = std::nullopt) {
    absl::StatusOr<std::unique_ptr<DatasetStore::Upload>> up =
        store_->BeginUpload(name, DType::kFloat32, v.size(), replace, ttl);
    if (!up.ok()) return up.status();
    const std::span<const std::byte> b = AsBytes(v);
    for (std::size_t at = 0; at < b.size(); at += 1000) {
      absl::Status s = (*up)->Append(Extent::PageableHost(b.subspan(at, std::min<std::size_t>(1000, b.size() - at))));
      if (!s.ok()) return s;
    }
    return (*up)->Commit();
  }

  // The dataset's pieces, end to end, are `v`; each piece's `first` is
  // where it lies in `v`.
  static bool Holds(const Dataset& d, const std::vector<float>& v) {
    std::uint64_t at = 0;
    for (const PlacedPiece& p : d.Pieces(0, d.info().length)) {
      if (p.first != at / sizeof(float) || at + p.extent.size() > v.size() * sizeof(float) ||
          std::memcmp(p.extent.bytes.data(), reinterpret_cast<const std::byte*>(v.data()) + at, p.extent.size()) != 0) {
        return false;
      }
      at += p.extent.size();
    }
    return at == v.size() * sizeof(float);
  }

  std::uint64_t ChargedBytes() { return store_->Usage().front().bytes; }

  // The store frees on its own thread: wait (boundedly) for the charge.
  bool ChargeBecomes(std::uint64_t bytes) {
    for (int i = 0; i < 200; ++i) {
      if (ChargedBytes() == bytes) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<Backend> backend_ = MakeCpuBackend(CpuBackendOptions{.threads = 2});
  std::unique_ptr<DatasetStore> store_;
};

TEST_F(DatasetStoreTest, UploadedBytesAreWhatIsRead) {
  const std::vector<float> v = Random(100003, testing::TestSeed());
  absl::StatusOr<DatasetInfo> info = Put("a", v);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->length, v.size());
  EXPECT_EQ(info->bytes, v.size() * 4);
  EXPECT_EQ(info->place, "host");
  absl::StatusOr<std::shared_ptr<const Dataset>> d = store_->Acquire("a");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(Holds(**d, v));
  EXPECT_EQ((*d)->Pieces(0, v.size()).front().extent.placement, Placement::PageableHost());
  EXPECT_EQ(store_->Describe("a")->queries, 1u);
}

TEST_F(DatasetStoreTest, NamesMustBePrintableAndShort) {
  const std::vector<float> v = Random(10, testing::TestSeed());
  EXPECT_EQ(Put("", v).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Put(std::string(257, 'x'), v).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Put("tab\there", v).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Put("caf\xc3\xa9", v).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Put(std::string(256, 'x'), v).ok());
  EXPECT_TRUE(Put("with spaces/and:punct~", v).ok());
  EXPECT_EQ(store_->Acquire("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DatasetStoreTest, AnUnfinishedUploadLeavesNothing) {
  const std::vector<float> v = Random(5000, testing::TestSeed());
  {
    auto up = store_->BeginUpload("short", DType::kFloat32, v.size(), false, std::nullopt);
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(Extent::PageableHost(AsBytes(v).first(400))).ok());
    const absl::Status s = (*up)->Commit().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  {
    auto up = store_->BeginUpload("long", DType::kFloat32, v.size() - 1, false, std::nullopt);
    ASSERT_TRUE(up.ok());
    EXPECT_EQ((*up)->Append(Extent::PageableHost(AsBytes(v))).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    auto up = store_->BeginUpload("dropped", DType::kFloat32, v.size(), false, std::nullopt);
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(Extent::PageableHost(AsBytes(v).first(400))).ok());
  }  // destroyed: a cancelled upload
  EXPECT_TRUE(store_->List().empty());
  EXPECT_EQ(ChargedBytes(), 0u);
  // The names are free again.
  EXPECT_TRUE(Put("short", v).ok());
  EXPECT_TRUE(Put("dropped", v).ok());
}

TEST_F(DatasetStoreTest, ExistingNamesNeedReplaceAndReadersKeepTheirVersion) {
  const std::vector<float> v1 = Random(3000, testing::TestSeed());
  const std::vector<float> v2 = Random(7000, testing::TestSeed() + 1);
  ASSERT_TRUE(Put("x", v1).ok());
  EXPECT_EQ(Put("x", v2).status().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::shared_ptr<const Dataset>> reader = store_->Acquire("x");
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<DatasetInfo> replaced = Put("x", v2, /*replace=*/true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_GT(replaced->version, (*reader)->info().version);
  // The query that started on the old version still reads it, whole.
  EXPECT_TRUE(Holds(**reader, v1));
  EXPECT_TRUE(Holds(**store_->Acquire("x"), v2));
  EXPECT_EQ(ChargedBytes(), (v1.size() + v2.size()) * 4 + 2 * kO);
  reader->reset();
  EXPECT_TRUE(ChargeBecomes(v2.size() * 4 + kO));
}

// What a read found of a version (ColumnFacts: a group-by's key range and
// largest magnitude) stays with that version: each reader of it sees it, and
// a replacement, whose bytes differ, starts with none.
TEST_F(DatasetStoreTest, ColumnFactsBelongToOneVersion) {
  ASSERT_TRUE(Put("f", Random(3000, testing::TestSeed())).ok());
  absl::StatusOr<std::shared_ptr<const Dataset>> first = store_->Acquire("f");
  ASSERT_TRUE(first.ok());
  ASSERT_NE((*first)->facts(), nullptr);
  EXPECT_FALSE((*first)->facts()->key_range().has_value());
  EXPECT_FALSE((*first)->facts()->largest_magnitude().has_value());
  (*first)->facts()->set_key_range({.lowest = 5, .range = 12});
  (*first)->facts()->set_largest_magnitude(0x3ff0000000000000ull);
  absl::StatusOr<std::shared_ptr<const Dataset>> second = store_->Acquire("f");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->facts()->key_range().has_value());
  EXPECT_EQ((*second)->facts()->key_range()->lowest, 5u);
  EXPECT_EQ((*second)->facts()->key_range()->range, 12u);
  EXPECT_EQ((*second)->facts()->largest_magnitude(), 0x3ff0000000000000ull);
  ASSERT_TRUE(Put("f", Random(5000, testing::TestSeed() + 1), /*replace=*/true).ok());
  absl::StatusOr<std::shared_ptr<const Dataset>> replaced = store_->Acquire("f");
  ASSERT_TRUE(replaced.ok());
  EXPECT_FALSE((*replaced)->facts()->key_range().has_value());
  EXPECT_FALSE((*replaced)->facts()->largest_magnitude().has_value());
  EXPECT_TRUE((*first)->facts()->key_range().has_value());  // the old version's readers keep theirs
}

TEST_F(DatasetStoreTest, OfTwoConcurrentUploadsOfANameExactlyOneWins) {
  const std::vector<float> v = Random(1000, testing::TestSeed());
  auto first = store_->BeginUpload("same", DType::kFloat32, v.size(), false, std::nullopt);
  ASSERT_TRUE(first.ok());
  auto second = store_->BeginUpload("same", DType::kFloat32, v.size(), true, std::nullopt);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE((*first)->Append(Extent::PageableHost(AsBytes(v))).ok());
  ASSERT_TRUE((*first)->Commit().ok());

  // Racing threads: one commit, the rest refused, nothing half-made.
  std::atomic<int> won{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      absl::StatusOr<DatasetInfo> r = Put("race", v);
      if (r.ok()) {
        ++won;
      } else if (r.status().code() == absl::StatusCode::kAlreadyExists) {
        ++refused;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(refused.load(), 7);
}

TEST_F(DatasetStoreTest, TheBudgetRefusesWhatDoesNotFitAndSaysWhy) {
  DatasetOptions o;
  o.max_bytes_per_place = 10000 + kO;
  Make(o);
  ASSERT_TRUE(Put("a", Random(2000, testing::TestSeed())).ok());  // 8000 bytes
  const absl::Status s = Put("b", Random(1000, testing::TestSeed())).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find(std::to_string(10000 + kO) + "-byte limit"), std::string::npos) << s;
  const std::string a = std::to_string(8000 + kO);
  EXPECT_NE(s.message().find("holds " + a + " bytes of its " + std::to_string(10000 + kO) +
                             "-byte limit (--max_dataset_bytes): " + a + " in 1 dataset(s), 0 in uploads in progress"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.message().find("still being read"), std::string::npos) << s;
  EXPECT_EQ(Put("huge", Random(3000, testing::TestSeed())).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->List().size(), 1u);  // nothing evicted without the flag
  ASSERT_TRUE(store_->Delete("a").ok());
  EXPECT_TRUE(ChargeBecomes(0));
  EXPECT_TRUE(Put("b", Random(1000, testing::TestSeed())).ok());
}

TEST_F(DatasetStoreTest, LruEvictionTakesTheLeastRecentlyQueried) {
  DatasetOptions o;
  o.max_bytes_per_place = 12000 + 3 * kO;
  o.evict_lru = true;
  Make(o);
  ASSERT_TRUE(Put("old", Random(1000, 1)).ok());
  ASSERT_TRUE(Put("mid", Random(1000, 2)).ok());
  ASSERT_TRUE(Put("new", Random(1000, 3)).ok());
  ASSERT_TRUE(store_->Acquire("old").ok());  // now the most recently used
  ASSERT_TRUE(Put("next", Random(1000, 4)).ok());
  std::vector<std::string> names;
  for (const DatasetInfo& i : store_->List()) names.push_back(i.name);
  EXPECT_EQ(names, (std::vector<std::string>{"new", "next", "old"}));
  // Larger than the whole budget: refused, nothing evicted for it.
  EXPECT_EQ(Put("huge", Random(6000, 5)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->List().size(), 3u);
}

TEST_F(DatasetStoreTest, LruEvictsOnlyAtTheCommitOfAWholeUpload) {
  DatasetOptions o;
  o.max_bytes_per_place = 12000 + 3 * kO;
  o.evict_lru = true;
  Make(o);
  ASSERT_TRUE(Put("a", Random(1000, 1)).ok());
  ASSERT_TRUE(Put("b", Random(1000, 2)).ok());
  ASSERT_TRUE(Put("c", Random(1000, 3)).ok());
  auto names = [&] {
    std::vector<std::string> out;
    for (const DatasetInfo& i : store_->List()) out.push_back(i.name);
    return out;
  };
  const std::vector<std::string> all{"a", "b", "c"};
  // An upload of the whole budget that ends early, is abandoned, or sends
  // too much evicts nothing.
  {
    auto up = store_->BeginUpload("big", DType::kFloat32, 3000, false, std::nullopt);
    ASSERT_TRUE(up.ok()) << up.status();
    const std::vector<float> part = Random(2, 4);
    ASSERT_TRUE((*up)->Append(Extent::PageableHost(AsBytes(part))).ok());
    EXPECT_EQ(names(), all);
    EXPECT_EQ((*up)->Commit().status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(names(), all);
  EXPECT_TRUE(ChargeBecomes(12000 + 3 * kO));
  // Uploads in progress never hold more than the budget between them.
  {
    auto first = store_->BeginUpload("x", DType::kFloat32, 2000, false, std::nullopt);
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = store_->BeginUpload("y", DType::kFloat32, 3000, false, std::nullopt);
    ASSERT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(second.status().message().find(std::to_string(8000 + kO) + " in uploads in progress"),
              std::string::npos)
        << second.status();
    EXPECT_EQ(second.status().message().find("still being read"), std::string::npos) << second.status();
  }
  EXPECT_EQ(names(), all);
  // The upload that arrives whole evicts, at its commit, the least recently
  // queried: "a" was queried last, so "b" and "c" go.
  ASSERT_TRUE(store_->Acquire("a").ok());
  ASSERT_TRUE(Put("d", Random(2000, 5)).ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"a", "d"}));
}

TEST_F(DatasetStoreTest, AReplaceNeedsRoomForOneVersion) {
  for (const bool lru : {false, true}) {
    SCOPED_TRACE(lru ? "with LRU eviction" : "without");
    DatasetOptions o;
    o.max_bytes_per_place = 12000 + 2 * kO;
    o.evict_lru = lru;
    Make(o);
    ASSERT_TRUE(Put("other", Random(1000, 1)).ok());
    ASSERT_TRUE(Put("r", Random(2000, 2)).ok());
    ASSERT_TRUE(store_->Acquire("other").ok());  // r is the least recently queried
    // A same-size replace at a full budget: nothing else is evicted.
    const std::vector<float> v = Random(2000, 3);
    ASSERT_TRUE(Put("r", v, /*replace=*/true).ok());
    std::vector<std::string> names;
    for (const DatasetInfo& i : store_->List()) names.push_back(i.name);
    EXPECT_EQ(names, (std::vector<std::string>{"other", "r"}));
    auto r = store_->Acquire("r");
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(Holds(**r, v));
    r->reset();
    EXPECT_TRUE(ChargeBecomes(12000 + 2 * kO));
  }
}

TEST_F(DatasetStoreTest, EmptyDatasetsAreChargedAndCounted) {
  DatasetOptions o;
  o.max_bytes_per_place = 10 * kO;
  o.max_datasets = 20;
  Make(o);
  // Empty datasets cost what a dataset costs: ten fit under ten overheads.
  int made = 0;
  absl::Status refused;
  for (int i = 0; i < 100 && refused.ok(); ++i) {
    absl::StatusOr<DatasetInfo> put = Put("empty" + std::to_string(i), {});
    if (put.ok()) ++made;
    else refused = put.status();
  }
  EXPECT_EQ(made, 10);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(ChargedBytes(), 10 * kO);
  // And no more of them than max_datasets, whatever the bytes.
  Make(DatasetOptions{.max_datasets = 20});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Put("d" + std::to_string(i), Random(1, 1)).ok());
  const absl::Status more = Put("one-more", Random(1, 1)).status();
  EXPECT_EQ(more.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(more.message().find("--max_datasets=20"), std::string::npos) << more;
  EXPECT_TRUE(Put("d3", Random(2, 2), /*replace=*/true).ok());  // a replace takes its old version's place
  ASSERT_TRUE(store_->Delete("d0").ok());
  EXPECT_TRUE(Put("one-more", Random(1, 1)).ok());
}

TEST_F(DatasetStoreTest, ExpiredDatasetsGoAndTheirMemoryWithThem) {
  ASSERT_TRUE(Put("brief", Random(1000, testing::TestSeed()), false, milliseconds(100)).ok());
  ASSERT_TRUE(Put("kept", Random(1000, testing::TestSeed())).ok());
  const DatasetInfo brief = *store_->Describe("brief");
  ASSERT_TRUE(brief.expires.has_value());
  EXPECT_EQ(*brief.expires - brief.created, milliseconds(100));
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_EQ(store_->Acquire("brief").status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(store_->List().size(), 1u);
  EXPECT_TRUE(ChargeBecomes(4000 + kO));
}

TEST_F(DatasetStoreTest, DeleteWhileReadLeavesTheReaderWhole) {
  const std::vector<float> v = Random(50000, testing::TestSeed());
  ASSERT_TRUE(Put("d", v).ok());
  absl::StatusOr<std::shared_ptr<const Dataset>> reader = store_->Acquire("d");
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(store_->Delete("d").ok());
  EXPECT_EQ(store_->Delete("d").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Acquire("d").status().code(), absl::StatusCode::kNotFound);
  // Still charged, still readable: a query on it finishes normally.
  EXPECT_EQ(ChargedBytes(), v.size() * 4 + kO);
  AggregationPlan plan;
  plan.array = {DType::kFloat32, v.size(), 0};
  plan.ops = {OpSpec{OpKind::kSum}};
  const std::vector<PlacedPiece> pieces = (*reader)->Pieces(0, v.size());
  ASSERT_EQ(pieces.size(), 1u);
  auto r = backend_->Start(plan, pieces.front().extent.placement);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->Consume(pieces.front().extent).ok());
  absl::StatusOr<AggregationResult> result = (*r)->Finish();
  ASSERT_TRUE(result.ok());
  double want = 0;
  for (float x : v) want += x;
  EXPECT_NEAR(std::get<0>(result->values[0])[0], want, 1e-6 * v.size());
  reader->reset();
  EXPECT_TRUE(ChargeBecomes(0));
}

TEST_F(DatasetStoreTest, DeviceBytesAreRefusedByTheCpuBackend) {
  AggregationPlan plan;
  plan.array = {DType::kFloat32, 4, 0};
  plan.ops = {OpSpec{OpKind::kSum}};
  EXPECT_EQ(backend_->Start(plan, Placement::Device(0)).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tally
