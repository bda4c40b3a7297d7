// The host side of tally/kernels/select.h's HyperLogLog: one pass for the
// registers; when they leave the count possibly within the host state's
// exact (sparse) limit, a second pass for the distinct hashes themselves.
#include <algorithm>
#include <vector>

#include "hll/hll_dispatch.h"
#include "select/scratch.h"
#include "select/selection.h"
#include "tally/kernels/cuda_error.h"
#include "tally/kernels/select.h"
#include "tally/rules/op.h"

namespace tally::kernels {
namespace {

struct HllLayout {
  std::uint32_t* registers = nullptr;  // 2^p words
  std::uint8_t* packed = nullptr;      // 2^p bytes
  std::uint64_t* set = nullptr;        // 2^p slots: four times the sparse limit
  std::uint32_t* counters = nullptr;   // HllExactKernel's three
};

HllLayout LayOutHll(std::uint32_t precision, select::Carver& c) {
  const std::size_t m = std::size_t{1} << precision;
  HllLayout at;
  at.registers = c.Take<std::uint32_t>(m);
  at.packed = c.Take<std::uint8_t>(m);
  at.set = c.Take<std::uint64_t>(m);
  at.counters = c.Take<std::uint32_t>(3);
  return at;
}

template <typename T>
cudaError_t HllOf(const DeviceArray& a, std::uint32_t p, void* scratch, cudaStream_t stream, HllSketch* out) {
  const T* data = static_cast<const T*>(a.data);
  const std::uint32_t m = 1u << p;
  // The host state's rule (hll_state.h, SparseLimit): exact while at most
  // 2^p / 4 distinct hashes.
  const std::uint32_t limit = m / 4;
  select::Carver c(scratch);
  const HllLayout at = LayOutHll(p, c);
  out->stats = {};
  out->hashes.clear();
  out->registers.assign(m, 0);
  TALLY_CUDA_TRY(cudaMemsetAsync(at.registers, 0, sizeof(std::uint32_t) * m, stream));
  TALLY_CUDA_TRY(hll::HllPasses<T>::Registers(data, a.length, p, at.registers, stream));
  TALLY_CUDA_TRY(hll::PackRegisters(at.registers, at.packed, m, stream));
  TALLY_CUDA_TRY(cudaMemcpyAsync(out->registers.data(), at.packed, m, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  ++out->stats.full_passes;
  // Each distinct hash sets one register: more non-zero registers than the
  // limit means more distinct hashes, and the sketch is dense.
  const auto set = static_cast<std::uint64_t>(
      std::count_if(out->registers.begin(), out->registers.end(), [](std::uint8_t r) { return r != 0; }));
  out->dense = set > limit;
  if (out->dense) return cudaSuccess;

  TALLY_CUDA_TRY(cudaMemsetAsync(at.set, 0, sizeof(std::uint64_t) * m, stream));
  TALLY_CUDA_TRY(cudaMemsetAsync(at.counters, 0, 3 * sizeof(std::uint32_t), stream));
  TALLY_CUDA_TRY(hll::HllPasses<T>::Exact(data, a.length, at.set, m, limit, at.counters, stream));
  std::uint32_t counters[3] = {0, 0, 0};
  TALLY_CUDA_TRY(cudaMemcpyAsync(counters, at.counters, sizeof counters, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  ++out->stats.full_passes;
  if (counters[2] != 0 || std::uint64_t{counters[0]} + counters[1] > limit) {
    out->dense = true;
    return cudaSuccess;
  }
  std::vector<std::uint64_t> slots(m);
  TALLY_CUDA_TRY(cudaMemcpyAsync(slots.data(), at.set, sizeof(std::uint64_t) * m, cudaMemcpyDeviceToHost, stream));
  TALLY_CUDA_TRY(cudaStreamSynchronize(stream));
  if (counters[1] != 0) out->hashes.push_back(0);
  for (const std::uint64_t h : slots) {
    if (h != 0) out->hashes.push_back(h);
  }
  std::sort(out->hashes.begin(), out->hashes.end());
  out->registers.clear();
  return cudaSuccess;
}

bool PrecisionOk(std::uint32_t p) { return p >= rules::kMinHllPrecision && p <= rules::kMaxHllPrecision; }

}  // namespace

cudaError_t HllScratchBytes(const DeviceArray& array, std::uint32_t precision, std::size_t* bytes) {
  if (!SelectSupports(array.dtype)) return TALLY_SELECT_INVALID("dtype not taken by the HyperLogLog passes");
  if (!PrecisionOk(precision)) return TALLY_SELECT_INVALID("precision must be 4 to 18");
  select::Carver c(nullptr);
  (void)LayOutHll(precision, c);
  *bytes = c.used();
  return cudaSuccess;
}

cudaError_t Hll(const DeviceArray& array, std::uint32_t precision, void* scratch, std::size_t scratch_bytes,
                cudaStream_t stream, HllSketch* out) {
  TALLY_CUDA_TRY(CheckSelectable(array));
  std::size_t need = 0;
  TALLY_CUDA_TRY(HllScratchBytes(array, precision, &need));
  if (scratch_bytes < need) return TALLY_SELECT_INVALID("Hll: too little scratch");
  cudaError_t status = cudaSuccess;
  select::VisitSelectable(array.dtype, [&](auto t) { status = HllOf<decltype(t)>(array, precision, scratch, stream, out); });
  return status;
}

}  // namespace tally::kernels
