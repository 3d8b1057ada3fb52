// SPDX-License-Identifier: MIT
//
// optim: the fused optimizer updates (SGD, Adam, AdamW) and the pieces of
// clip_grad_norm_ on CUDA (formulas in optim_kernels.h).
//
// One kernel per parameter tensor per step: each thread reads an element of
// the parameter, its gradient and its state, applies the whole update in
// registers and writes each back once. PyTorch's single-tensor path runs
// five to ten whole-tensor kernels for the same update (mul_, add_,
// addcmul_, sqrt, div, add_, addcdiv_), each a round trip through memory.
//
// Invariant: the arithmetic is the CPU's (cpu_optim.c), operation for
// operation in the parameter's dtype. nvcc would contract a * b + c into an
// FMA (one rounding instead of two); cti_rn (kernel_util.cuh: the __fmul_rn
// / __fadd_rn family on the device) is never contracted, so every product is rounded before the sum as on the
// CPU, and division and square root are the correctly rounded ones. The CPU
// and this backend therefore give the same bits for the same step. The
// updates' per-element bodies live in optim.cuh, where the host test runs
// them too.
//
// clip_grad_norm_ stays on the device: a sum-of-squares kernel per gradient
// (per-block partials in double, then one block adds them in order, so the
// result is reproducible), one thread that forms the total norm and the clip
// coefficient, and a scaling kernel per gradient that reads the coefficient
// from device memory. Nothing waits for the host unless the caller asks for
// the norm's value.
#include "cuda_backend.h"
#include "kernel_util.cuh"
#include "optim.cuh"
#include "optim_kernels.h"

// ---- SGD, Adam, AdamW: per-element bodies in optim.cuh ----------------------------------------
static int cuda_sgd_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                            const cti_sgd_step_args *a, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_sgd_step_run(cti_device_exec{scope.stream()}, dt, n, param, grad, buf, a);
}

static int cuda_adam_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *exp_avg,
                             void *exp_avg_sq, void *max_exp_avg_sq, const cti_adam_step_args *a,
                             ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_adam_step_run(cti_device_exec{scope.stream()}, dt, n, param, grad, exp_avg, exp_avg_sq,
                          max_exp_avg_sq, a);
}

// ---- clip_grad_norm_ ---------------------------------------------------------------------------
constexpr int SUMSQ_THREADS = 256;
constexpr int SUMSQ_MAX_BLOCKS = 1024; // partials per tensor (the workspace's size)

// Sum of the block's threads' values (blockDim.x == SUMSQ_THREADS), in a
// fixed tree order; the result is valid in thread 0.
static __device__ double block_sum(double v) {
  __shared__ double sh[SUMSQ_THREADS];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = SUMSQ_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

// partial[blockIdx.x] := sum of x[i]^2 over the block's grid-stride share.
template <class T>
static __global__ void sumsq_partial_kernel(int64_t n, const T *__restrict__ x,
                                            double *__restrict__ partial) {
  double s = 0.0;
  for (int64_t i = cti_grid_start<int64_t>(); i < n; i += cti_grid_step<int64_t>()) {
    double v = (double)x[i];
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// *out := sum of partial[0..nparts), one block.
static __global__ void sumsq_finish_kernel(int nparts, const double *__restrict__ partial,
                                           double *__restrict__ out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

static int64_t cuda_sum_squares_workspace(void) { return SUMSQ_MAX_BLOCKS; }

static int cuda_sum_squares(ct_dtype dt, int64_t n, const void *x, double *out,
                                   double *workspace, ct_stream *s) {
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "ct_clip_grad_norm_: not supported for %s grads on cuda",
                   cti_dt_name(dt));
  cti_cuda_scope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  int64_t want = cti_ceil_div(n > 0 ? n : 1, SUMSQ_THREADS);
  int blocks = (int)(want < SUMSQ_MAX_BLOCKS ? want : SUMSQ_MAX_BLOCKS);
  if (dt == CT_F32)
    CT_LAUNCH(sumsq_partial_kernel<float>)(blocks, SUMSQ_THREADS, 0, scope.stream())(
        n, static_cast<const float *>(x), workspace);
  else
    CT_LAUNCH(sumsq_partial_kernel<double>)(blocks, SUMSQ_THREADS, 0, scope.stream())(
        n, static_cast<const double *>(x), workspace);
  CT_CUDA_CHECK(cudaGetLastError());
  CT_LAUNCH(sumsq_finish_kernel)(1, SUMSQ_THREADS, 0, scope.stream())(blocks, workspace, out);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// out[0] := total norm, out[1] := clip coefficient (torch's clip_coef_clamped).
static __global__ void clip_coef_kernel(int64_t n, const double *__restrict__ sumsq,
                                        double max_norm, double *__restrict__ out) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += sumsq[i];
  double total = sqrt(s);
  double coef = max_norm / (total + 1e-6);
  if (coef > 1.0) coef = 1.0; // NaN stays NaN, as torch.clamp(max=1.0)
  out[0] = total;
  out[1] = coef;
}

static int cuda_clip_coef(int64_t n, const double *sumsq, double max_norm, double *out,
                                 ct_stream *s) {
  cti_cuda_scope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  CT_LAUNCH(clip_coef_kernel)(1, 1, 0, scope.stream())(n, sumsq, max_norm, out);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

static int cuda_scale_by(ct_dtype dt, int64_t n, void *x, const double *coef, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_scale_by_run(cti_device_exec{scope.stream()}, dt, n, x, coef);
}

// ---- GradScaler's step count on the device --------------------------------------------------------
static __global__ void amp_prologue_kernel(const float *found_inf, double *state, bool adam, double lr,
                                           double beta1, double beta2) {
  cti_amp_prologue_rule(*found_inf, state, adam, lr, beta1, beta2);
}

static int cuda_amp_prologue(const float *found_inf, double *state, bool adam, double lr,
                                double beta1, double beta2, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  CT_LAUNCH(amp_prologue_kernel)(1, 1, 0, scope.stream())(found_inf, state, adam, lr, beta1, beta2);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// ---- the family's table ------------------------------------------------------------------------
// In the family list's order (nvcc's C++17 has no designated initializers),
// so the order cannot drift from the table's: each entry is the static cuda_<entry>.
#define CTI_OP_CUDA_PREFIX cuda_
extern "C" const cti_optim_kernels cti_cuda_optim_kernels = {CTI_OPTIM_OPS(CTI_OP_CUDA_INIT)};
