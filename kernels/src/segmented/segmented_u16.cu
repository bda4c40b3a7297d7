// The variable-length segmented kernels for uint16 input (one dtype per file
// keeps each compile unit small).
#include "segmented/segmented_kernels.cuh"

TALLY_SEGMENTED_INSTANTIATE(kUInt16)
