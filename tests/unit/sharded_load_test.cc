// Sharded queries under concurrent load, without a GPU: LaneSlots (the
// cuda backend's free lanes per GPU) wakes a waiter that can take a
// returned lane, ReducePieces never holds one place's lane while it waits
// for another's, and it issues every part's end before it waits for one. A backend with a few lanes per "GPU" (host bytes
// labelled as device memory, reduced by the cpu backend) reproduces the
// shape of many clients querying datasets sharded over several GPUs.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/engine/cpu/cpu_backend.h"
#include "server/engine/lane_slots.h"
#include "server/engine/reduce_pieces.h"
#include "tests/unit/cpu_test_util.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;

TEST(LaneSlots, AReturnedLaneWakesAWaiterForItsPlace) {
  LaneSlots slots({1, 1});
  const LaneSlots::Taken a = slots.Take(0, 0ms), b = slots.Take(1, 0ms);
  ASSERT_EQ(a.outcome, LaneSlots::Outcome::kGot);
  ASSERT_EQ(b.outcome, LaneSlots::Outcome::kGot);
  // Many waiters for place 1 queue first, then one for place 0. A lane of
  // place 0 given back must reach that one, not one of the others.
  std::vector<std::jthread> for_one;
  std::atomic<int> got_one{0};
  for (int i = 0; i < 8; ++i) {
    for_one.emplace_back([&] {
      const LaneSlots::Taken t = slots.Take(1, 3000ms);
      if (t.outcome == LaneSlots::Outcome::kGot) {
        got_one.fetch_add(1);
        slots.Give(t.place, t.lane);
      }
    });
  }
  std::this_thread::sleep_for(50ms);
  LaneSlots::Taken zero;
  std::jthread for_zero([&] { zero = slots.Take(0, 3000ms); });
  std::this_thread::sleep_for(50ms);
  slots.Give(a.place, a.lane);
  for_zero.join();
  EXPECT_EQ(zero.outcome, LaneSlots::Outcome::kGot);
  EXPECT_LT(zero.waited_seconds, 1.0) << "the waiter for place 0 slept past the returned lane";
  EXPECT_EQ(got_one.load(), 0) << "place 1 had no free lane yet";
  slots.Give(b.place, b.lane);
  for_one.clear();  // joined: each took place 1's lane in turn
  EXPECT_EQ(got_one.load(), 8);
}

TEST(LaneSlots, AnyPlaceTakesTheFreestAndLostPlacesEndWaits) {
  LaneSlots slots({1, 3});
  const LaneSlots::Taken t = slots.Take(-1, 0ms);
  ASSERT_EQ(t.outcome, LaneSlots::Outcome::kGot);
  EXPECT_EQ(t.place, 1);
  const LaneSlots::Taken zero = slots.Take(0, 0ms);
  ASSERT_EQ(zero.outcome, LaneSlots::Outcome::kGot);
  EXPECT_EQ(slots.Take(0, 10ms).outcome, LaneSlots::Outcome::kBusy);
  LaneSlots::Taken waiting;
  std::jthread waiter([&] { waiting = slots.Take(0, 5000ms); });
  std::this_thread::sleep_for(50ms);
  slots.MarkLost(0);
  waiter.join();
  EXPECT_EQ(waiting.outcome, LaneSlots::Outcome::kLost);
  EXPECT_LT(waiting.waited_seconds, 1.0);
  slots.Give(zero.place, zero.lane);
  EXPECT_EQ(slots.Take(0, 0ms).outcome, LaneSlots::Outcome::kLost);  // a lost place's lane stays unused
  EXPECT_EQ(slots.Take(-1, 0ms).place, 1);
}

// A backend with `lanes` lanes per place: a Reduction of bytes placed on
// GPU d holds one of place d's lanes from Start until it is destroyed, and
// takes `work` in Finish (the kernels' time). The bytes are host bytes
// labelled as device memory; the cpu backend reduces them. It counts the
// Starts (which wait for a lane; StartIfFree does not) made while their
// thread held another lane.
class LanedBackend : public Backend {
 public:
  LanedBackend(int places, int lanes, std::chrono::milliseconds wait, std::chrono::microseconds work)
      : slots_(std::vector<int>(places, lanes)), wait_(wait), work_(work), cpu_(MakeCpuBackend({.threads = 1})) {}

  std::string name() const override { return "laned"; }
  std::string device() const override { return "test lanes"; }
  absl::StatusOr<std::unique_ptr<Reduction>> Start(const AggregationPlan& plan, const Placement& from) override {
    if (held_ > 0) held_while_waiting_.fetch_add(1);
    return StartWithin(plan, from, wait_);
  }
  absl::StatusOr<std::unique_ptr<Reduction>> StartIfFree(const AggregationPlan& plan,
                                                         const Placement& from) override {
    return StartWithin(plan, from, std::chrono::milliseconds(0));
  }
  int held_while_waiting() const { return held_while_waiting_.load(); }
  // Parts sealed (Reduction::Seal) when the first Finish began; -1 before.
  int sealed_at_first_finish() const { return sealed_at_first_finish_.load(); }

 private:
  absl::StatusOr<std::unique_ptr<Reduction>> StartWithin(const AggregationPlan& plan, const Placement& from,
                                                         std::chrono::milliseconds wait) {
    const LaneSlots::Taken t = slots_.Take(from.device, wait);
    if (t.outcome != LaneSlots::Outcome::kGot) return absl::ResourceExhaustedError("lanes stayed busy");
    absl::StatusOr<std::unique_ptr<Reduction>> inner = cpu_->Start(plan);
    if (!inner.ok()) {
      slots_.Give(t.place, t.lane);
      return inner.status();
    }
    ++held_;
    return std::unique_ptr<Reduction>(std::make_unique<OnLane>(this, t, std::move(*inner)));
  }

  class OnLane : public Reduction {
   public:
    OnLane(LanedBackend* owner, LaneSlots::Taken lane, std::unique_ptr<Reduction> inner)
        : owner_(owner), lane_(lane), inner_(std::move(inner)) {}
    ~OnLane() override {
      --held_;
      owner_->slots_.Give(lane_.place, lane_.lane);
    }
    absl::Status Consume(const Extent& e) override { return inner_->Consume(Extent::PageableHost(e.bytes)); }
    std::size_t element_size() const override { return inner_->element_size(); }
    absl::Status Seal() override {
      owner_->sealed_.fetch_add(1);
      return absl::OkStatus();
    }
    absl::StatusOr<AggregationResult> Finish() override {
      int none = -1;
      owner_->sealed_at_first_finish_.compare_exchange_strong(none, owner_->sealed_.load());
      std::this_thread::sleep_for(owner_->work_);
      return inner_->Finish();
    }

   private:
    LanedBackend* owner_;
    LaneSlots::Taken lane_;
    std::unique_ptr<Reduction> inner_;
  };

  static thread_local int held_;  // lanes this thread holds
  LaneSlots slots_;
  const std::chrono::milliseconds wait_;
  const std::chrono::microseconds work_;
  std::unique_ptr<Backend> cpu_;
  std::atomic<int> held_while_waiting_{0};
  std::atomic<int> sealed_{0};
  std::atomic<int> sealed_at_first_finish_{-1};
};
thread_local int LanedBackend::held_ = 0;

// `a` in `places` shards of equal size, shard p "on GPU p".
std::vector<PlacedPiece> Shards(const Array& a, int places) {
  const std::size_t es = rules::SizeOf(a.dtype);
  std::vector<PlacedPiece> shards;
  for (int p = 0; p < places; ++p) {
    const std::uint64_t first = a.length * p / places, end = a.length * (p + 1) / places;
    shards.push_back(PlacedPiece{first, Extent{std::span(a.bytes).subspan(first * es, (end - first) * es),
                                               Placement::Device(p)}});
  }
  return shards;
}

// 48 clients, each querying arrays cut into 4 shards on 4 places of 2
// lanes: every query succeeds with the one-extent answer, and no Start
// waits while its thread holds a lane. (Starting each place's shard in
// turn while holding the earlier ones' lanes failed here: held while
// waiting on nearly every query.)
TEST(ShardedLoad, ManyClientsOnEveryPlaceNeverHoldALaneWhileWaiting) {
  TALLY_SEEDED_RNG(rng);
  constexpr int kPlaces = 4, kClients = 48, kQueries = 12;
  LanedBackend laned(kPlaces, 2, 5000ms, 300us);
  auto cpu = MakeCpuBackend({.threads = 1});
  const Array a = RandomArray(DType::kInt64, 40000, rng, Fill::kWide);
  std::vector<OpSpec> ops;
  for (OpKind k : {OpKind::kSum, OpKind::kMin, OpKind::kMax, OpKind::kArgmax, OpKind::kCount}) ops.push_back({.kind = k});
  const std::vector<PlacedPiece> shards = Shards(a, kPlaces);
  const std::size_t es = rules::SizeOf(DType::kInt64);
  for (const std::uint64_t row : {std::uint64_t{0}, std::uint64_t{7}}) {
    const std::uint64_t n = row == 0 ? a.length : a.length / row * row;
    const AggregationPlan plan{{DType::kInt64, n, row}, ops};
    std::vector<PlacedPiece> pieces = shards;
    pieces.back().extent = pieces.back().extent.Sub(0, (n - pieces.back().first) * es);
    const PlacedPiece whole{0, Extent::PageableHost(std::span(a.bytes).first(n * es))};
    absl::StatusOr<AggregationResult> want = ReducePieces(*cpu, plan, std::span(&whole, 1), [] { return false; });
    ASSERT_TRUE(want.ok()) << want.status();
    std::atomic<int> failed{0}, wrong{0};
    {
      std::vector<std::jthread> clients;
      for (int c = 0; c < kClients; ++c) {
        clients.emplace_back([&] {
          for (int q = 0; q < kQueries; ++q) {
            absl::StatusOr<AggregationResult> got = ReducePieces(laned, plan, pieces, [] { return false; });
            if (!got.ok()) failed.fetch_add(1);
            else if (!(got->values == want->values)) wrong.fetch_add(1);
          }
        });
      }
    }
    EXPECT_EQ(failed.load(), 0) << "rows " << row;
    EXPECT_EQ(wrong.load(), 0) << "rows " << row;
  }
  EXPECT_EQ(laned.held_while_waiting(), 0);
}

// One query over 4 places: every part's last steps are issued (Seal) before
// the first part is waited for, so the GPUs end side by side. (Finishing
// each in turn, issuing its last kernels only then, put each GPU's ending
// after the one before: 19 us a GPU on 4 H200s.)
TEST(ShardedLoad, EveryPartIsSealedBeforeTheFirstIsWaitedFor) {
  TALLY_SEEDED_RNG(rng);
  constexpr int kPlaces = 4;
  LanedBackend laned(kPlaces, 1, 1000ms, 0us);
  const Array a = RandomArray(DType::kFloat32, 4000, rng, Fill::kWide);
  const std::vector<PlacedPiece> shards = Shards(a, kPlaces);
  const AggregationPlan plan{{DType::kFloat32, a.length, 0}, {OpSpec{.kind = OpKind::kMax}}};
  absl::StatusOr<AggregationResult> got = ReducePieces(laned, plan, shards, [] { return false; });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(laned.sealed_at_first_finish(), kPlaces);
}

}  // namespace
}  // namespace tally::testing
