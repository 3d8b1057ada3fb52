// SPDX-License-Identifier: MIT
//
// amp: GradScaler's scale update and reciprocal on CUDA, one thread each
// (the rules are amp_kernels.h's, shared with the CPU). Queued on the
// stream; nothing waits, so a training step never stops for the scale.
#include "amp_kernels.h"
#include "kernel_util.cuh"

static __global__ void update_scale_kernel(float *scale, int32_t *tracker, const float *found_inf,
                                           double growth_factor, double backoff_factor,
                                           int64_t growth_interval, int64_t *skipped) {
  cti_amp_update_scale_rule(scale, tracker, *found_inf, growth_factor, backoff_factor, growth_interval,
                            skipped);
}

static __global__ void inv_scale_kernel(const float *scale, float *inv) {
  *inv = cti_amp_inv_scale_rule(*scale);
}

static int cuda_update_scale(float *scale, int32_t *tracker, const float *found_inf,
                                double growth_factor, double backoff_factor, int64_t growth_interval,
                                int64_t *skipped, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  CT_LAUNCH(update_scale_kernel)(1, 1, 0, scope.stream())(scale, tracker, found_inf, growth_factor,
                                                   backoff_factor, growth_interval, skipped);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

static int cuda_inv_scale(const float *scale, float *inv, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  CT_LAUNCH(inv_scale_kernel)(1, 1, 0, scope.stream())(scale, inv);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// In the family list's order (nvcc's C++17 has no designated initializers),
// so the order cannot drift from the table's: each entry is the static cuda_<entry>.
#define CTI_OP_CUDA_PREFIX cuda_
extern "C" const cti_amp_kernels cti_cuda_amp_kernels = {CTI_AMP_OPS(CTI_OP_CUDA_INIT)};
