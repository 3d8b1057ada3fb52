// SPDX-License-Identifier: MIT
//
// cuda_check: the one macro every CUDA runtime and cuBLAS call goes through.
//
// CT_CUDA_CHECK(call) runs `call`; if it fails it records an error with the
// call's text, file and line and CUDA's own words, then returns CT_ERR_CUDA
// from the enclosing function (which must return int / ct_status):
//   "cudaMalloc(&p, n) failed at common/core/alloc.c:120: cudaErrorMemoryAllocation (out of memory)"
// After a kernel launch write CT_CUDA_CHECK(cudaGetLastError()).
#ifndef CT_CUDA_CHECK_H
#define CT_CUDA_CHECK_H

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif
ct_status ct_cuda_fail(int err, const char *call, const char *file, int line);
ct_status ct_cublas_fail(int status, const char *call, const char *file, int line);
#ifdef __cplusplus
}
#endif

#define CT_CUDA_CHECK(call)                                                  \
  do {                                                                       \
    cudaError_t ct_err_ = (call);                                            \
    if (ct_err_ != cudaSuccess)                                              \
      return ct_cuda_fail((int)ct_err_, #call, __FILE__, __LINE__);          \
  } while (0)

// CT_LAUNCH(kernel)(grid, block, smem, stream)(args...) is the one launch form
// in the sources. nvcc sees kernel<<<grid, block, smem, stream>>>(args...);
// the SIMT emulator's build (preset `sim`, tools/sim/ct_sim.h defines it
// before this point) runs the same kernel on the CPU. The kernel comes first
// and alone so that a template's commas need no extra parentheses:
//   CT_LAUNCH(ct_reduce_rows_kernel<R>)(dim3(gx, 1), CT_ROWS_THREADS, 0, stream)(...);
#ifndef CT_LAUNCH
#define CT_LAUNCH(...) __VA_ARGS__ CT_LAUNCH_CONFIG_
#define CT_LAUNCH_CONFIG_(grid, block, smem, stream) <<<grid, block, smem, stream>>>
#endif

#define CT_CUBLAS_CHECK(call)                                                \
  do {                                                                       \
    int ct_st_ = (int)(call);                                                \
    if (ct_st_ != 0)                                                         \
      return ct_cublas_fail(ct_st_, #call, __FILE__, __LINE__);              \
  } while (0)
#endif

#endif
