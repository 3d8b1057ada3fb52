// SPDX-License-Identifier: MIT
//
// amp_kernels: the amp family's loops (internal): GradScaler's scale update
// and its reciprocal, on the CPU (cpu/cpu_amp.c) and on CUDA (kernels/amp.cu):
// entry `x` is cpu_amp.c's static `x` and kernels/amp.cu's static `cuda_x`.
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

#include "hostdev.h"
#include "oplist.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu), with
// its types: the scale is a float, the factors doubles (the product is formed
// in double and rounded to float), the tracker an int32.
//   found_inf != 0: scale *= backoff_factor; tracker = 0       (a skipped step)
//   else:           tracker + 1 == growth_interval ? (scale *= growth_factor
//                   unless that overflows float32; tracker = 0) : tracker += 1
// *skipped (may be NULL) counts the found_inf updates (ct's addition).
static inline CTI_HD void cti_amp_update_scale_rule(float *scale, int32_t *tracker, float found_inf,
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
static inline CTI_HD float cti_amp_inv_scale_rule(float scale) { return (float)(1.0 / (double)scale); }

#define CTI_AMP_OPS(X)                                                                               \
  X(amp, update_scale, OP, int, "_amp_update_scale_", CTI_SH_CONST("[[1], [1], [1]]"),                \
    ARG(float *, scale), ARG(int32_t *, tracker), ARG(const float *, found_inf),                      \
    ARG(double, growth_factor), ARG(double, backoff_factor), ARG(int64_t, growth_interval),           \
    ARG(int64_t *, skipped))                                                                         \
  X(amp, inv_scale, OP, int, "reciprocal", CTI_SH_CONST("[[1]]"), ARG(const float *, scale),          \
    ARG(float *, inv))
typedef struct cti_amp_kernels {
  CTI_AMP_OPS(CTI_OP_FIELD)
} cti_amp_kernels;

extern const cti_amp_kernels cti_cpu_amp_kernels;  // cpu/cpu_amp.c
extern const cti_amp_kernels cti_cuda_amp_kernels; // kernels/amp.cu (CUDA builds only)

#ifdef __cplusplus
}
#endif
#endif
