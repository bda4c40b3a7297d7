// Unit tests of the front end's own parts: re-blocking a byte stream into
// whole elements, admission control, and plan validation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "server/core/validate.h"
#include "server/frontend/admission.h"
#include "server/engine/element_aligner.h"
#include "tests/unit/test_seed.h"

namespace tally {
namespace {

using namespace std::chrono_literals;

TEST(ElementAligner, AnyChunkingGivesTheSameWholeElementsInOrder) {
  TALLY_SEEDED_RNG(rng);
  for (std::size_t size : {1u, 4u, 8u}) {
    std::vector<std::byte> bytes(size * 1001);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    for (int trial = 0; trial < 20; ++trial) {
      ElementAligner aligner(size);
      std::vector<std::byte> seen;
      std::size_t at = 0;
      while (at < bytes.size()) {
        const std::size_t n = std::min<std::size_t>(bytes.size() - at, 1 + rng() % (3 * size + 5));
        ASSERT_TRUE(aligner
                        .Push(std::span<const std::byte>(bytes.data() + at, n),
                              [&](std::span<const std::byte> whole) {
                                EXPECT_EQ(whole.size() % size, 0u);
                                seen.insert(seen.end(), whole.begin(), whole.end());
                                return absl::OkStatus();
                              })
                        .ok());
        at += n;
      }
      EXPECT_EQ(aligner.carried(), 0u);
      EXPECT_EQ(seen, bytes) << "element size " << size << ", trial " << trial;
    }
  }
}

TEST(ElementAligner, HoldsBackAPartialElementAndPassesErrorsOn) {
  ElementAligner aligner(8);
  const std::byte five[5] = {};
  int calls = 0;
  auto sink = [&](std::span<const std::byte>) {
    ++calls;
    return absl::InternalError("backend failed");
  };
  EXPECT_TRUE(aligner.Push(five, sink).ok());  // nothing whole yet
  EXPECT_EQ(aligner.carried(), 5u);
  EXPECT_EQ(calls, 0);
  const absl::Status s = aligner.Push(five, sink);  // completes one element
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls, 1);
}

const std::string kCaller = "caller";

TEST(AdmissionController, RefusesBeyondTheBudgetAndFreesOnRelease) {
  AdmissionController admission(100, 50ms, nullptr, nullptr);
  auto a = admission.TryAdmit(60, kCaller);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(admission.in_flight(), 60u);
  auto b = admission.TryAdmit(50, kCaller);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("--max_inflight_bytes"), absl::string_view::npos);
  { auto c = admission.TryAdmit(40, kCaller); ASSERT_TRUE(c.ok()); EXPECT_EQ(admission.in_flight(), 100u); }
  EXPECT_EQ(admission.in_flight(), 60u);  // c gave its bytes back
  *a = AdmissionController::Ticket();     // so does a
  EXPECT_EQ(admission.in_flight(), 0u);
}

TEST(AdmissionController, ARequestLargerThanTheBudgetRunsAlone) {
  AdmissionController admission(100, 10ms, nullptr, nullptr);
  auto big = admission.TryAdmit(1000, kCaller);
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(admission.TryAdmit(1, kCaller).ok());
  // An empty chunk holds nothing, so it never waits, even now.
  EXPECT_TRUE(admission.TryAdmit(0, kCaller).ok());
  EXPECT_TRUE(admission.Admit(0, kCaller).ok());
}

TEST(AdmissionController, AdmitWaitsForRoomThenGivesUp) {
  AdmissionController admission(100, 300ms, nullptr, nullptr);
  auto held = admission.TryAdmit(100, kCaller);
  ASSERT_TRUE(held.ok());
  // Freed while the second request waits: it gets in.
  auto waiter = std::async(std::launch::async, [&] { return admission.Admit(50, kCaller).ok(); });
  std::this_thread::sleep_for(50ms);
  *held = AdmissionController::Ticket();
  EXPECT_TRUE(waiter.get());
  // Not freed: refused after the wait.
  auto again = admission.TryAdmit(100, kCaller);
  ASSERT_TRUE(again.ok());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(admission.Admit(50, kCaller).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
}

AggregationPlan PlanOf(std::uint64_t length, std::uint64_t row_length, std::vector<OpSpec> ops) {
  AggregationPlan plan;
  plan.array = {rules::DType::kFloat32, length, row_length};
  plan.ops = std::move(ops);
  return plan;
}

TEST(ValidatePlan, AcceptsTheLimitsAndRejectsJustBeyondThem) {
  const RequestLimits limits;
  OpSpec hist{OpKind::kHistogram, 0, {rules::kMaxHistogramBins, -1, 1}};
  EXPECT_TRUE(ValidatePlan(PlanOf(10, 0, {hist}), limits).ok());
  hist.histogram.bins = rules::kMaxHistogramBins + 1;
  EXPECT_EQ(ValidatePlan(PlanOf(10, 0, {hist}), limits).code(), absl::StatusCode::kInvalidArgument);
  OpSpec var{OpKind::kVariance, 0.0, {}};
  EXPECT_TRUE(ValidatePlan(PlanOf(10, 5, {var}), limits).ok());
  var.ddof = -0.5;
  EXPECT_EQ(ValidatePlan(PlanOf(10, 5, {var}), limits).code(), absl::StatusCode::kInvalidArgument);
  // Empty arrays: a sum is fine, a min is not; an empty batch of rows is.
  EXPECT_TRUE(ValidatePlan(PlanOf(0, 0, {OpSpec{OpKind::kSum}}), limits).ok());
  EXPECT_FALSE(ValidatePlan(PlanOf(0, 0, {OpSpec{OpKind::kMin}}), limits).ok());
  EXPECT_TRUE(ValidatePlan(PlanOf(0, 4, {OpSpec{OpKind::kMin}}), limits).ok());
  // The result-size limit counts a histogram's bins and its three counters.
  RequestLimits small;
  small.max_result_values = 2 * (16 + 3);
  OpSpec h16{OpKind::kHistogram, 0, {16, 0, 1}};
  EXPECT_TRUE(ValidatePlan(PlanOf(20, 10, {h16}), small).ok());
  EXPECT_EQ(ValidatePlan(PlanOf(30, 10, {h16}), small).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tally
