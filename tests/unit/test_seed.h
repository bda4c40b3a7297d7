// A per-run random seed for tests with random inputs: fresh every run unless
// TALLY_TEST_SEED is set, and shown in any failure so the run can be repeated.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace tally::testing {

inline std::uint64_t TestSeed() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    if (const char* s = std::getenv("TALLY_TEST_SEED")) return std::strtoull(s, nullptr, 0);
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  return seed;
}

}  // namespace tally::testing

// An rng for one test, seeded from the run's seed and the test's name, and a
// trace line that shows the seed in any failure below it.
#define TALLY_SEEDED_RNG(rng)                                                                  \
  SCOPED_TRACE(::testing::Message() << "TALLY_TEST_SEED=" << ::tally::testing::TestSeed());    \
  std::mt19937_64 rng(::tally::testing::TestSeed() ^                                           \
                      std::hash<std::string>{}(                                                \
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
