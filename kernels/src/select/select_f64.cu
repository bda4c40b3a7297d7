// The selection's full passes over double elements (select_dispatch.h).
#include "select/select_passes.cuh"

namespace tally::kernels::select {
template struct ElementPasses<double>;
}  // namespace tally::kernels::select
