// SPDX-License-Identifier: MIT
//
// amp_kernels: the amp family's loops (internal): GradScaler's scale update
// and its reciprocal, on the CPU (cpu/cpu_amp.c) and on CUDA (kernels/amp.cu).
//
// Invariant: the rules are written once, below, as functions both compilers
// build (plain C for the CPU backend, __host__ __device__ for nvcc), and
// each backend only runs them: one thread on CUDA, at once on the CPU. So
// the scale sequence a CPU test checks against PyTorch's is, operation for
// operation, the one a GPU computes. Every pointer is memory of the entry's
// device; CUDA entries queue on `s` and never wait.
#ifndef CT_AMP_KERNELS_H
#define CT_AMP_KERNELS_H

#include <math.h>
#include <stdint.h>

#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define CTI_AMP_HD __host__ __device__
#else
#define CTI_AMP_HD
#endif

// torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu), with
// its types: the scale is a float, the factors doubles (the product is formed
// in double and rounded to float), the tracker an int32.
//   found_inf != 0: scale *= backoff_factor; tracker = 0       (a skipped step)
//   else:           tracker + 1 == growth_interval ? (scale *= growth_factor
//                   unless that overflows float32; tracker = 0) : tracker += 1
// *skipped (may be NULL) counts the found_inf updates (ct's addition).
static inline CTI_AMP_HD void cti_amp_update_scale_rule(float *scale, int32_t *tracker, float found_inf,
                                                         double growth_factor, double backoff_factor,
                                                         int64_t growth_interval, int64_t *skipped) {
  if (found_inf != 0.0f) {
    *scale = (float)((double)*scale * backoff_factor);
    *tracker = 0;
    if (skipped) *skipped += 1;
    return;
  }
  const int64_t successful = (int64_t)*tracker + 1;
  if (successful == growth_interval) {
    const float grown = (float)((double)*scale * growth_factor);
    if (isfinite(grown)) *scale = grown; // never grow past float32's range to inf
    *tracker = 0;
  } else {
    *tracker = (int32_t)successful;
  }
}

// GradScaler.unscale_'s inv_scale = scale.double().reciprocal().float().
static inline CTI_AMP_HD float cti_amp_inv_scale_rule(float scale) { return (float)(1.0 / (double)scale); }

typedef struct cti_amp_kernels {
  int (*update_scale)(float *scale, int32_t *tracker, const float *found_inf, double growth_factor,
                      double backoff_factor, int64_t growth_interval, int64_t *skipped, ct_stream *s);
  int (*inv_scale)(const float *scale, float *inv, ct_stream *s);
} cti_amp_kernels;

extern const cti_amp_kernels cti_cpu_amp_kernels;  // cpu/cpu_amp.c
extern const cti_amp_kernels cti_cuda_amp_kernels; // kernels/amp.cu (CUDA builds only)

#ifdef __cplusplus
}
#endif
#endif
