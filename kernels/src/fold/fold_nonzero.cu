// numpy.count_nonzero on the GPU: the fold pass reading elements as
// unsigned words of their width (NonzeroFold), so four instantiations
// serve the 13 dtypes.
#include "fold/fold_dispatch.h"
#include "fold/fold_kernels.cuh"

namespace tally::kernels::detail {

cudaError_t LaunchNonzero(const AggregatePlan& plan, const void* chunk, std::uint64_t n, std::uint64_t offset,
                          void* state, void* scratch, std::size_t scratch_bytes, const DeviceInfo& dev,
                          cudaStream_t stream) {
  const bool is_float = rules::IsFloat(plan.dtype);
  auto fold = [&](auto word) {
    using U = decltype(word);
    const U sign = is_float ? static_cast<U>(U{1} << (8 * sizeof(U) - 1)) : U{0};
    return LaunchFold(NonzeroFold<U>{sign}, plan, chunk, n, offset, static_cast<std::uint64_t*>(state), scratch,
                      scratch_bytes, dev, stream);
  };
  switch (rules::SizeOf(plan.dtype)) {
    case 1: return fold(std::uint8_t{});
    case 2: return fold(std::uint16_t{});
    case 4: return fold(std::uint32_t{});
    default: return fold(std::uint64_t{});
  }
}

}  // namespace tally::kernels::detail
