// The host side of tally/kernels/select.h's DDSketch: one counting pass
// over the whole range of the accuracy's bucket indices, read back as each
// sign's non-zero buckets in index order (the host state's serialised form).
// Only the counters between each sign's lowest and highest counted index
// come back: at 1% the whole range is 1.6 MB of counters, whose copy into
// fresh host memory took as long as the pass over 1 GiB.
#include <cstdint>
#include <vector>

#include "ddsketch/ddsketch_dispatch.h"
#include "select/scratch.h"
#include "select/selection.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"
#include "tally/rules/agg/ddsketch_state.h"
#include "tally/rules/op.h"

namespace tally::kernels {
namespace {

using rules::agg::ddsketch_detail::Mapping;

bool AccuracyOk(double alpha) {
  return alpha >= rules::kMinDdSketchAccuracy && alpha <= rules::kMaxDdSketchAccuracy;
}

// Counters for every index of both signs, then zero, -inf and +inf.
std::size_t CounterCount(const Mapping& mapping) {
  const std::size_t span = static_cast<std::size_t>(mapping.MaxIndex() - mapping.MinIndex() + 1);
  return 2 * span + ddsketch::kTailSlots;
}

template <typename T>
cudaError_t DdSketchOf(const DeviceArray& a, double alpha, void* scratch, cudaStream_t stream, DdSketchCounts* out) {
  const Mapping mapping(alpha);
  const std::int32_t min_index = mapping.MinIndex();
  const std::int32_t span = mapping.MaxIndex() - min_index + 1;
  const std::size_t counters = CounterCount(mapping);
  select::Carver c(scratch);
  auto* counts = c.Take<unsigned long long>(counters);
  TALLY_CUDA_TRY(cudaMemsetAsync(counts, 0, counters * sizeof(unsigned long long), stream));
  TALLY_CUDA_TRY(ddsketch::DdSketchPasses<T>::Count(static_cast<const T*>(a.data), a.length, mapping.multiplier(),
                                                     min_index, span, counts, stream));
  TALLY_CUDA_TRY(ddsketch::CountEdges(span, counts, stream));
  unsigned long long tail[ddsketch::kTailSlots];
  const auto tail_at = 2 * static_cast<std::size_t>(span);
  TALLY_CUDA_TRY(cudaMemcpyAsync(tail, counts + tail_at, sizeof tail, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  // Each sign's counters from its lowest counted index to its highest.
  std::vector<unsigned long long> host[2];
  std::int32_t first[2] = {0, 0};
  for (int sign = 0; sign < 2; ++sign) {
    const unsigned long long lowest = tail[ddsketch::kFirstEdgeSlot + 2 * sign];
    const unsigned long long highest = tail[ddsketch::kFirstEdgeSlot + 2 * sign + 1];
    if (lowest == 0) continue;  // nothing of this sign
    first[sign] = span - static_cast<std::int32_t>(lowest);
    host[sign].resize(static_cast<std::size_t>(highest) - static_cast<std::size_t>(first[sign]));
    TALLY_CUDA_TRY(cudaMemcpyAsync(host[sign].data(), counts + static_cast<std::size_t>(sign) * span + first[sign],
                                   host[sign].size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
  }
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  *out = DdSketchCounts{};
  out->stats.full_passes = 1;
  for (int sign = 0; sign < 2; ++sign) {
    std::vector<DdSketchCounts::Bucket>& buckets = sign == 0 ? out->negative : out->positive;
    for (std::size_t i = 0; i < host[sign].size(); ++i) {
      if (host[sign][i] != 0) buckets.push_back({min_index + first[sign] + static_cast<std::int32_t>(i), host[sign][i]});
    }
  }
  out->zero = tail[ddsketch::kZeroSlot];
  out->negative_inf = tail[ddsketch::kNegativeInfSlot];
  out->positive_inf = tail[ddsketch::kPositiveInfSlot];
  return cudaSuccess;
}

}  // namespace

cudaError_t DdSketchScratchBytes(const DeviceArray& array, double relative_accuracy, std::size_t* bytes) {
  if (!SelectSupports(array.dtype)) return TALLY_SELECT_INVALID("dtype not taken by the DDSketch pass");
  if (!AccuracyOk(relative_accuracy)) return TALLY_SELECT_INVALID("relative_accuracy must be 0.001 to 0.5");
  select::Carver c(nullptr);
  (void)c.Take<unsigned long long>(CounterCount(Mapping(relative_accuracy)));
  *bytes = c.used();
  return cudaSuccess;
}

cudaError_t DdSketch(const DeviceArray& array, double relative_accuracy, void* scratch, std::size_t scratch_bytes,
                     cudaStream_t stream, DdSketchCounts* out) {
  TALLY_CUDA_TRY(CheckSelectable(array));
  std::size_t need = 0;
  TALLY_CUDA_TRY(DdSketchScratchBytes(array, relative_accuracy, &need));
  if (scratch_bytes < need) return TALLY_SELECT_INVALID("DdSketch: too little scratch");
  cudaError_t status = cudaSuccess;
  select::VisitSelectable(array.dtype,
                          [&](auto t) { status = DdSketchOf<decltype(t)>(array, relative_accuracy, scratch, stream, out); });
  return status;
}

}  // namespace tally::kernels
