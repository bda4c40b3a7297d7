// The fused aggregation kernels for int64 input (one dtype per file keeps
// each compile unit small; CI builds on 2 cores).
#include "grid/aggregate_kernels.cuh"

namespace tally::kernels::detail {
template cudaError_t ScratchBytesFor<rules::DType::kInt64>(const AggregatePlan&, std::uint64_t,
                                                      const DeviceInfo&, std::size_t*);
template cudaError_t LaunchAccumulate<rules::DType::kInt64>(const AggregatePlan&, const ResultLayout&,
                                                       const void*, std::uint64_t, std::uint64_t,
                                                       void*, void*, std::size_t,
                                                       const DeviceInfo&, cudaStream_t, ExactPass*);
}  // namespace tally::kernels::detail
