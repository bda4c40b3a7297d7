// The variable-length segmented kernels for bfloat16 input (one dtype per file
// keeps each compile unit small).
#include "segmented/segmented_kernels.cuh"

TALLY_SEGMENTED_INSTANTIATE(kBFloat16)
