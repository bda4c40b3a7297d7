// The selection's full passes over float elements (select_dispatch.h).
#include "select/select_passes.cuh"

namespace tally::kernels::select {
template struct ElementPasses<float>;
}  // namespace tally::kernels::select
