// Hostile shared-memory regions: names in /dev/shm that are not
// shared-memory objects (a FIFO would hold a worker in open() until a
// writer came) are refused at once, and a refused registration keeps
// neither its name nor its bytes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

using namespace std::chrono_literals;
using hostile::ServedRun;

// A FIFO in /dev/shm, as any process that can write there can make one.
// Going, it opens its write end once, which frees any reader still blocked
// in open() (a server without the fix), so a failing test still ends.
class FifoInDevShm {
 public:
  FifoInDevShm() : name_("tally-fifo-" + std::to_string(getpid())) {
    ::unlink(path().c_str());
    made_ = ::mkfifo(path().c_str(), 0666) == 0;
  }
  ~FifoInDevShm() {
    const int fd = ::open(path().c_str(), O_RDWR | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ::unlink(path().c_str());
  }
  bool made() const { return made_; }
  const std::string& name() const { return name_; }
  std::string path() const { return "/dev/shm/" + name_; }

 private:
  std::string name_;
  bool made_ = false;
};

grpc::Status RegisterHost(v1::SharedMemory::Stub& stub, const std::string& name, const std::string& shm_name,
                          std::uint64_t bytes, std::chrono::milliseconds deadline = 5s) {
  v1::RegisterHostRegionRequest r;
  r.set_name(name);
  r.set_shm_name(shm_name);
  r.set_byte_size(bytes);
  v1::RegionInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  return stub.RegisterHostRegion(&ctx, r, &info);
}

TEST_F(HostileClientTest, AFifoInDevShmIsRefusedAtOnceAndHoldsNothing) {
  FifoInDevShm fifo;
  if (!fifo.made()) GTEST_SKIP() << "cannot make a FIFO in /dev/shm";
  ServerConfig config;
  Start(config);
  auto regions = v1::SharedMemory::NewStub(channel_);
  const ServedRun unloaded = Unloaded();

  // More registrations of the FIFO at once than there are request workers,
  // one of them declaring the whole --max_region_bytes.
  const int calls = config.request_threads + 16;
  std::vector<grpc::Status> statuses(calls);
  std::vector<std::thread> threads;
  for (int i = 0; i < calls; ++i) {
    threads.emplace_back([&, i] {
      auto stub = v1::SharedMemory::NewStub(hostile::NewConnection(target_));
      statuses[i] = RegisterHost(*stub, "fifo-" + std::to_string(i), fifo.name(),
                                 i == 0 ? config.max_region_bytes : 4096);
    });
  }
  for (std::thread& t : threads) t.join();
  int refused = 0;
  for (const grpc::Status& s : statuses) {
    refused += s.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    EXPECT_NE(s.error_message().find("shm_name"), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("FIFO"), std::string::npos) << s.error_message();
  }
  // Were workers stuck in open(), the measurement below would wait on them.
  ASSERT_EQ(refused, calls) << "registrations of a FIFO not refused at once: " << statuses[0].error_message();
  ExpectServedAsUnloaded(unloaded, hostile::WellBehavedClient(channel_, kRequests));

  // Nothing of the refused registrations stayed: no bytes, no names.
  EXPECT_EQ(Metric("tally_region_bytes"), 0);
  EXPECT_EQ(Metric("tally_regions"), 0);
  ShmObject object("tally-fifo-test-" + std::to_string(getpid()), 1 << 20);
  ASSERT_TRUE(object.ok());
  EXPECT_TRUE(RegisterHost(*regions, "fifo-0", object.name(), 1 << 20).ok());
  v1::UnregisterRegionRequest unregister;
  unregister.set_name("fifo-0");
  v1::RegionInfo info;
  grpc::ClientContext ctx;
  EXPECT_TRUE(regions->UnregisterRegion(&ctx, unregister, &info).ok());
  ExpectNothingHeld();
}

TEST_F(HostileClientTest, BadRegionNamesAreRefusedAsRegionNames) {
  Start(ServerConfig{});
  auto regions = v1::SharedMemory::NewStub(channel_);
  ShmObject object("tally-name-test-" + std::to_string(getpid()), 4096);
  ASSERT_TRUE(object.ok());
  for (const std::string& name : {std::string(), std::string("tab\there"), std::string(300, 'r')}) {
    const grpc::Status s = RegisterHost(*regions, name, object.name(), 4096);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("region name"), std::string::npos) << s.error_message();
    EXPECT_EQ(s.error_message().find("dataset"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(Metric("tally_regions"), 0);
}

}  // namespace
}  // namespace tally::testing
