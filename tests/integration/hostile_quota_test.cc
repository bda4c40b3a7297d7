// One identity over its in-flight quota from many threads at once: each
// refusal is counted once in tally_quota_rejections_total (and in
// tally_admission_rejections_total for the server-wide budget), however
// the refused request was admitted (tried at once, then waited for).
#include <atomic>
#include <thread>
#include <vector>

#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;

class HostileQuotaTest : public HostileClientTest {
 protected:
  // `threads` clients sending 3 MiB unary requests for `run`; how many were
  // refused with a message containing `reason`.
  int Flood(int threads, std::chrono::milliseconds run, const std::string& reason) {
    std::atomic<int> refused{0}, served{0};
    std::vector<std::thread> pool;
    const auto end = std::chrono::steady_clock::now() + run;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        auto stub = v1::Aggregator::NewStub(hostile::NewConnection(target_));
        v1::AggregateRequest r;
        r.mutable_spec()->set_dtype(v1::DTYPE_UINT8);
        r.set_data(std::string(3 << 20, '\1'));
        *r.add_aggregations() = Op(v1::OP_SUM);
        while (std::chrono::steady_clock::now() < end) {
          v1::AggregateResponse resp;
          grpc::ClientContext ctx;
          const grpc::Status s = stub->Aggregate(&ctx, r, &resp);
          if (s.ok()) {
            ++served;
          } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
                     s.error_message().find(reason) != std::string::npos) {
            ++refused;
          } else {
            ADD_FAILURE() << s.error_message();
          }
        }
      });
    }
    for (std::thread& t : pool) t.join();
    std::printf("%d served, %d refused (%s)\n", served.load(), refused.load(), reason.c_str());
    return refused.load();
  }
};

TEST_F(HostileQuotaTest, EachQuotaRefusalIsCountedOnce) {
  ServerConfig config;
  config.quotas.inflight_bytes = 4 << 20;  // one 3 MiB request at a time
  config.service.admission_wait = 0ms;
  Start(config);
  const int refused = Flood(6, 1500ms, "--quota_inflight_bytes");
  ASSERT_GT(refused, 0);
  EXPECT_EQ(Metric("tally_quota_rejections_total"), refused);
  ExpectNothingHeld();
}

TEST_F(HostileQuotaTest, EachAdmissionRefusalIsCountedOnce) {
  ServerConfig config;
  config.service.max_inflight_bytes = 4 << 20;
  config.service.admission_wait = 0ms;
  Start(config);
  const int refused = Flood(6, 1500ms, "--max_inflight_bytes");
  ASSERT_GT(refused, 0);
  EXPECT_EQ(Metric("tally_admission_rejections_total"), refused);
  ExpectNothingHeld();
}

}  // namespace
}  // namespace tally::testing
