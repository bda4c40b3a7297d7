// The selection's full passes over std::uint32_t elements (select_dispatch.h).
#include "select/select_passes.cuh"

namespace tally::kernels::select {
template struct ElementPasses<std::uint32_t>;
}  // namespace tally::kernels::select
