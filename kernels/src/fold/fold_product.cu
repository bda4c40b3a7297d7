// numpy.prod on the GPU: the fold pass with each dtype's product functor.
#include "fold/fold_dispatch.h"
#include "fold/fold_kernels.cuh"

namespace tally::kernels::detail {

std::size_t FoldScratch(const AggregatePlan& plan, std::uint64_t max_chunk) {
  return FoldScratchBytes(plan, max_chunk);
}

template <rules::DType D>
cudaError_t LaunchProduct(const AggregatePlan& plan, const void* chunk, std::uint64_t n, std::uint64_t offset,
                          void* state, void* scratch, std::size_t scratch_bytes, const DeviceInfo& dev,
                          cudaStream_t stream) {
  using F = ProductFold<D>;
  return LaunchFold(F{}, plan, chunk, n, offset, static_cast<typename F::Acc*>(state), scratch, scratch_bytes, dev,
                    stream);
}

#define TALLY_PRODUCT(D)                                                                                      \
  template cudaError_t LaunchProduct<rules::DType::D>(const AggregatePlan&, const void*, std::uint64_t,       \
                                                      std::uint64_t, void*, void*, std::size_t,               \
                                                      const DeviceInfo&, cudaStream_t);
TALLY_PRODUCT(kFloat32)
TALLY_PRODUCT(kFloat64)
TALLY_PRODUCT(kInt32)
TALLY_PRODUCT(kInt64)
TALLY_PRODUCT(kUInt32)
TALLY_PRODUCT(kUInt8)
TALLY_PRODUCT(kInt8)
TALLY_PRODUCT(kInt16)
TALLY_PRODUCT(kUInt16)
TALLY_PRODUCT(kUInt64)
TALLY_PRODUCT(kBool)
TALLY_PRODUCT(kFloat16)
TALLY_PRODUCT(kBFloat16)
#undef TALLY_PRODUCT

}  // namespace tally::kernels::detail
