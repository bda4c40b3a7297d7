// The selection's full passes over std::int64_t elements (select_dispatch.h).
#include "select/select_passes.cuh"

namespace tally::kernels::select {
template struct ElementPasses<std::int64_t>;
}  // namespace tally::kernels::select
