// A host region's mapping against a client that truncates its object: reads
// of the cut pages do not kill the process (the SIGBUS guard maps zero pages
// over the region), and the mapping reports what happened, whether the
// truncation came before a read or in the middle of a reduction.
#include "server/engine/regions/shm_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <vector>

#include "server/engine/cpu/cpu_backend.h"
#include "tally/client/shared_memory.h"

namespace tally {
namespace {

using client::SharedMemoryObject;

std::unique_ptr<SharedMemoryObject> Filled(std::size_t floats) {
  auto o = SharedMemoryObject::Create(SharedMemoryObject::UniqueName("guard"), floats * sizeof(float));
  EXPECT_TRUE(o.ok()) << o.status();
  std::vector<float> v(floats, 1.0f);
  std::memcpy((*o)->bytes().data(), v.data(), floats * sizeof(float));
  return std::move(*o);
}

void Truncate(const std::string& shm_name, off_t bytes) {
  const int fd = shm_open(shm_name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  close(fd);
}

TEST(ShmMapping, ReadingPagesCutByATruncationDoesNotKillTheProcess) {
  auto object = Filled(1 << 20);
  auto mapping = ShmMapping::Open(object->name(), 0, object->size());
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  ASSERT_TRUE((*mapping)->Intact().ok());
  Truncate(object->name(), 0);
  // Without the guard this read is SIGBUS.
  const auto* p = reinterpret_cast<const volatile unsigned char*>((*mapping)->bytes().data());
  unsigned sum = 0;
  for (std::size_t i = 0; i < object->size(); i += 4096) sum += p[i];
  EXPECT_EQ(sum, 0u);  // zero pages
  const absl::Status s = (*mapping)->Intact();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("truncated while registered"), std::string::npos) << s;
}

TEST(ShmMapping, ATruncationInTheMiddleOfAReductionIsReportedAfterIt) {
  auto object = Filled(4 << 20);
  auto mapping = ShmMapping::Open(object->name(), 0, object->size());
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  std::unique_ptr<Backend> cpu = MakeCpuBackend({});
  AggregationPlan plan;
  plan.array.length = 4 << 20;
  plan.ops = {OpSpec{OpKind::kSum}};
  auto reduction = cpu->Start(plan, Placement::PageableHost());
  ASSERT_TRUE(reduction.ok());
  const Extent whole = Extent::PageableHost((*mapping)->bytes());
  ASSERT_TRUE((*reduction)->Consume(whole.Sub(0, whole.size() / 2)).ok());
  Truncate(object->name(), 4096);
  ASSERT_TRUE((*reduction)->Consume(whole.Sub(whole.size() / 2, whole.size() / 2)).ok());
  ASSERT_TRUE((*reduction)->Finish().ok());
  EXPECT_EQ((*mapping)->Intact().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ShmMapping, ASmallerObjectIsRefusedAndATruncationWithoutAFaultIsSeen) {
  auto object = Filled(1024);
  EXPECT_EQ(ShmMapping::Open(object->name(), 1, 4096).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmMapping::Open("/tally-none-" + std::to_string(getpid()), 0, 1).status().code(),
            absl::StatusCode::kNotFound);
  auto mapping = ShmMapping::Open(object->name(), 100, 3000);
  ASSERT_TRUE(mapping.ok());
  EXPECT_EQ(std::memcmp((*mapping)->bytes().data(), object->bytes().data() + 100, 3000), 0);
  Truncate(object->name(), 3099);  // one byte short of the region's end
  const absl::Status s = (*mapping)->Intact();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("truncated to 3099 bytes"), std::string::npos) << s;
}

TEST(ShmMapping, ASigbusOutsideEveryRegionStillKillsTheProcess) {
  auto object = Filled(4096);  // made (and unlinked) by this process, not the child that dies
  EXPECT_EXIT(
      {
        auto guarded = ShmMapping::Open(object->name(), 0, object->size());  // installs the guard
        const int fd = shm_open(object->name().c_str(), O_RDWR, 0);
        void* p = mmap(nullptr, 16384, PROT_READ, MAP_SHARED, fd, 0);
        ftruncate(fd, 0);
        std::printf("%d\n", static_cast<const volatile char*>(p)[0]);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace tally
