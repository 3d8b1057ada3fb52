// SPDX-License-Identifier: MIT
// The SIMT emulator stands in for the CUDA runtime header (tools/sim/README.md).
#include "ct_sim.h"
