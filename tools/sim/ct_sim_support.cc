// SPDX-License-Identifier: MIT
//
// ct_sim_support.cc: what the kernel files need from the runtime that the
// sim preset's CPU-only libct does not compile: ct_cuda_fail (core/error.c
// builds it only with CT_HAVE_CUDA). Same message as error.c's, on the
// emulator's runtime. Stage 2 (tools/sim/README.md) builds libct itself with
// CT_HAVE_CUDA on the emulator, and this file goes.
#include "ct_sim.h"

#include <string.h>

#include "error.h"

extern "C" ct_status ct_cuda_fail(int err, const char *call, const char *file, int line) {
  cudaError_t e = (cudaError_t)err;
  ct_status st = (e == cudaErrorMemoryAllocation) ? CT_ERR_OOM : CT_ERR_CUDA;
  (void)cudaGetLastError();
  const char *s = strrchr(file, '/');
  return ct_fail(st, "%s failed at %s:%d: %s (%s)", call, s ? s + 1 : file, line, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}
