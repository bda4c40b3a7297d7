// The variable-length segmented kernels for float32 input (one dtype per file
// keeps each compile unit small).
#include "segmented/segmented_kernels.cuh"

TALLY_SEGMENTED_INSTANTIATE(kFloat32)
