// SPDX-License-Identifier: MIT
//
// ch02_kernels: chapter 2's own teaching kernel, and one PCI query.
//
// fma_burn is deliberately compute-bound: each thread loads one float, runs a
// chain of `iters` fused multiply-adds on it in registers and stores it back.
// Its time grows linearly with `iters` and hardly touches memory, so the
// chapter can calibrate it to last as long as a host->device copy and then
// show the two running at once: the copy on the copy engine, the kernel on
// the SMs.
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cuda_check.h"
#include "error.h"

// x is (n,) f32 on the current device; a grid-stride loop covers any n.
static __global__ void fma_burn_kernel(float *x, int64_t n, int iters) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = x[i];
    // The multiplier keeps v bounded (v converges to -b / (a - 1) = 1 and
    // stays there), so the result is finite whatever iters is.
    const float a = 0.999f, b = 0.001f;
    for (int k = 0; k < iters; ++k) v = fmaf(v, a, b);
    x[i] = v;
  }
}

// Launches fma_burn on `stream` (a cudaStream_t; NULL is the legacy default
// stream) of the current device. Returns CT_OK, or an error naming the
// launch; never waits for the kernel.
extern "C" int ch02_fma_burn(float *x, int64_t n, int iters, void *stream) {
  if (!x || n <= 0 || iters < 0)
    return ct_fail(CT_ERR_VALUE, "ch02_fma_burn: bad arguments (x=%p, n=%lld, iters=%d)", (void *)x,
                   (long long)n, iters);
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535; // the grid-stride loop covers the rest
  fma_burn_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(x, n, iters);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// The PCI address of CUDA device `index`, "domain:bus:device.function" in
// hexadecimal, into buf (len bytes; 16 are enough).
extern "C" int ch02_pci_bus_id(int index, char *buf, int len) {
  if (!buf || len < 13) return ct_fail(CT_ERR_VALUE, "ch02_pci_bus_id: buffer of %d bytes is too small", len);
  CT_CUDA_CHECK(cudaDeviceGetPCIBusId(buf, len, index));
  return CT_OK;
}
