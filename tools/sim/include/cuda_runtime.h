// SPDX-License-Identifier: MIT
// The SIMT emulator stands in for the CUDA runtime header (tools/sim/README.md).
// With CT_SIM_TOOLKIT_VECTOR_TYPES (the sim build of the runtime's CUDA
// backend) the toolkit's declarations come first; ct_sim.cc answers them.
#if defined(CT_SIM_TOOLKIT_VECTOR_TYPES) && !defined(CT_SIM_TOOLKIT_API_INCLUDED)
#define CT_SIM_TOOLKIT_API_INCLUDED 1
#include_next <cuda_runtime_api.h>
#endif
#ifdef __cplusplus
#include "ct_sim.h"
#endif
