#include "server/engine/cpu/host_resident.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tally::cpu {
namespace {

class HostResident final : public ResidentMemory {
 public:
  HostResident(std::byte* data, std::uint64_t bytes) : data_(data), bytes_(bytes) {}
  ~HostResident() override {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  HostResident(const HostResident&) = delete;
  HostResident& operator=(const HostResident&) = delete;

  absl::Status Append(const Extent& piece) override {
    if (!piece.placement.host()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the cpu backend cannot read ", piece.placement.Describe(), "."));
    }
    if (piece.size() > bytes_ - filled_) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: more than the ", bytes_, " bytes the dataset was declared with."));
    }
    std::memcpy(data_ + filled_, piece.bytes.data(), piece.size());
    filled_ += piece.size();
    return absl::OkStatus();
  }

  absl::Status Seal() override {
    if (filled_ != bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: received ", filled_, " of the ", bytes_, " bytes declared."));
    }
    return absl::OkStatus();
  }

  Extent extent() const override {
    return Extent{{data_, static_cast<std::size_t>(bytes_)}, Placement::PageableHost()};
  }

 private:
  std::byte* data_;
  std::uint64_t bytes_;
  std::uint64_t filled_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateHostResident(std::uint64_t bytes) {
  if (bytes == 0) return std::make_unique<HostResident>(nullptr, 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the host could not map ", bytes, " bytes for a dataset: ", std::strerror(errno)));
  }
  // Transparent huge pages where the system allows them: fewer TLB misses
  // when every core sweeps the array.
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return std::make_unique<HostResident>(static_cast<std::byte*>(p), bytes);
}

}  // namespace tally::cpu
