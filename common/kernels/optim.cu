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
// FMA (one rounding instead of two); the __fmul_rn / __fadd_rn family is
// never contracted, so every product is rounded before the sum as on the
// CPU, and division and square root are the correctly rounded ones. The CPU
// and this backend therefore give the same bits for the same step.
//
// clip_grad_norm_ stays on the device: a sum-of-squares kernel per gradient
// (per-block partials in double, then one block adds them in order, so the
// result is reproducible), one thread that forms the total norm and the clip
// coefficient, and a scaling kernel per gradient that reads the coefficient
// from device memory. Nothing waits for the host unless the caller asks for
// the norm's value.
#include "cuda_backend.h"
#include "kernel_util.cuh"
#include "optim_kernels.h"

// ---- arithmetic rounded once per operation -----------------------------------------------------
template <class T> struct Rn;
template <> struct Rn<float> {
  __device__ static float mul(float a, float b) { return __fmul_rn(a, b); }
  __device__ static float add(float a, float b) { return __fadd_rn(a, b); }
  __device__ static float div(float a, float b) { return __fdiv_rn(a, b); }
  __device__ static float sqrt(float a) { return __fsqrt_rn(a); }
};
template <> struct Rn<double> {
  __device__ static double mul(double a, double b) { return __dmul_rn(a, b); }
  __device__ static double add(double a, double b) { return __dadd_rn(a, b); }
  __device__ static double div(double a, double b) { return __ddiv_rn(a, b); }
  __device__ static double sqrt(double a) { return __dsqrt_rn(a); }
};

// ---- SGD ---------------------------------------------------------------------------------------
template <class T> struct SgdScalars {
  T wd, mom, damp1, neg_lr;
  bool has_wd, has_mom, nesterov, maximize, init;
};

// param, grad, buf: n elements each (buf unused without momentum).
template <class T>
static __global__ void sgd_kernel(int64_t n, T *__restrict__ param, const T *__restrict__ grad,
                                  T *__restrict__ buf, SgdScalars<T> k) {
  using R = Rn<T>;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    T p = param[i];
    T d = k.maximize ? -grad[i] : grad[i];
    if (k.has_wd) d = R::add(d, R::mul(k.wd, p));
    if (k.has_mom) {
      T b = k.init ? d : R::add(R::mul(buf[i], k.mom), R::mul(k.damp1, d));
      buf[i] = b;
      d = k.nesterov ? R::add(d, R::mul(k.mom, b)) : b;
    }
    param[i] = R::add(p, R::mul(k.neg_lr, d));
  }
}

template <class T>
static int sgd_launch(int64_t n, void *param, const void *grad, void *buf,
                      const ct_sgd_step_args *a, cudaStream_t stream) {
  SgdScalars<T> k;
  k.wd = (T)a->weight_decay;
  k.mom = (T)a->momentum;
  k.damp1 = (T)(1.0 - a->dampening);
  k.neg_lr = (T)(-a->lr);
  k.has_wd = a->weight_decay != 0.0;
  k.has_mom = a->momentum != 0.0;
  k.nesterov = a->nesterov;
  k.maximize = a->maximize;
  k.init = a->init_buf;
  sgd_kernel<T><<<ct_blocks_for(n, CT_THREADS), CT_THREADS, 0, stream>>>(
      n, static_cast<T *>(param), static_cast<const T *>(grad), static_cast<T *>(buf), k);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

static int ct_cuda_sgd_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                                const ct_sgd_step_args *a, ct_stream *s) {
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step: SGD not supported for %s on cuda",
                   ct_dt_name(dt));
  if (n <= 0) return CT_OK;
  CtCudaScope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  return dt == CT_F32 ? sgd_launch<float>(n, param, grad, buf, a, scope.stream())
                      : sgd_launch<double>(n, param, grad, buf, a, scope.stream());
}

// ---- Adam / AdamW ------------------------------------------------------------------------------
template <class T> struct AdamScalars {
  T wd, decay, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
  bool has_wd, decoupled, amsgrad, maximize;
};

// param, grad, exp_avg, exp_avg_sq, vmax (amsgrad only): n elements each.
template <class T>
static __global__ void adam_kernel(int64_t n, T *__restrict__ param, const T *__restrict__ grad,
                                   T *__restrict__ exp_avg, T *__restrict__ exp_avg_sq,
                                   T *__restrict__ vmax, AdamScalars<T> k) {
  using R = Rn<T>;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    T p = param[i];
    T g = k.maximize ? -grad[i] : grad[i];
    if (k.decoupled) p = R::mul(p, k.decay);
    else if (k.has_wd) g = R::add(g, R::mul(k.wd, p));
    T m = R::add(R::mul(exp_avg[i], k.b1), R::mul(k.omb1, g));
    T v = R::add(R::mul(exp_avg_sq[i], k.b2), R::mul(R::mul(k.omb2, g), g));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T vh = v;
    if (k.amsgrad) {
      T mx = vmax[i];
      mx = (mx != mx || mx > v) ? mx : v; // torch.maximum: NaN propagates
      vmax[i] = mx;
      vh = mx;
    }
    T denom = R::add(R::div(R::sqrt(vh), k.bc2_sqrt), k.eps);
    param[i] = R::add(p, R::div(R::mul(k.neg_step, m), denom));
  }
}

template <class T>
static int adam_launch(int64_t n, void *param, const void *grad, void *exp_avg, void *exp_avg_sq,
                       void *vmax, const ct_adam_step_args *a, cudaStream_t stream) {
  AdamScalars<T> k;
  k.wd = (T)a->weight_decay;
  k.decay = (T)(1.0 - a->lr * a->weight_decay);
  k.b1 = (T)a->beta1;
  k.omb1 = (T)(1.0 - a->beta1);
  k.b2 = (T)a->beta2;
  k.omb2 = (T)(1.0 - a->beta2);
  k.bc2_sqrt = (T)a->bias_correction2_sqrt;
  k.eps = (T)a->eps;
  k.neg_step = (T)(-a->step_size);
  k.has_wd = a->weight_decay != 0.0;
  k.decoupled = a->decoupled;
  k.amsgrad = a->amsgrad;
  k.maximize = a->maximize;
  adam_kernel<T><<<ct_blocks_for(n, CT_THREADS), CT_THREADS, 0, stream>>>(
      n, static_cast<T *>(param), static_cast<const T *>(grad), static_cast<T *>(exp_avg),
      static_cast<T *>(exp_avg_sq), static_cast<T *>(vmax), k);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

static int ct_cuda_adam_step(ct_dtype dt, int64_t n, void *param, const void *grad,
                                 void *exp_avg, void *exp_avg_sq, void *max_exp_avg_sq,
                                 const ct_adam_step_args *a, ct_stream *s) {
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step: Adam not supported for %s on cuda",
                   ct_dt_name(dt));
  if (n <= 0) return CT_OK;
  CtCudaScope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  return dt == CT_F32 ? adam_launch<float>(n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, a,
                                           scope.stream())
                      : adam_launch<double>(n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq,
                                            a, scope.stream());
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
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
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

static int64_t ct_cuda_sum_squares_workspace(void) { return SUMSQ_MAX_BLOCKS; }

static int ct_cuda_sum_squares(ct_dtype dt, int64_t n, const void *x, double *out,
                                   double *workspace, ct_stream *s) {
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "ct_clip_grad_norm_: not supported for %s grads on cuda",
                   ct_dt_name(dt));
  CtCudaScope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  int64_t want = ct_ceil_div(n > 0 ? n : 1, SUMSQ_THREADS);
  int blocks = (int)(want < SUMSQ_MAX_BLOCKS ? want : SUMSQ_MAX_BLOCKS);
  if (dt == CT_F32)
    sumsq_partial_kernel<float><<<blocks, SUMSQ_THREADS, 0, scope.stream()>>>(
        n, static_cast<const float *>(x), workspace);
  else
    sumsq_partial_kernel<double><<<blocks, SUMSQ_THREADS, 0, scope.stream()>>>(
        n, static_cast<const double *>(x), workspace);
  CT_CUDA_CHECK(cudaGetLastError());
  sumsq_finish_kernel<<<1, SUMSQ_THREADS, 0, scope.stream()>>>(blocks, workspace, out);
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

static int ct_cuda_clip_coef(int64_t n, const double *sumsq, double max_norm, double *out,
                                 ct_stream *s) {
  CtCudaScope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  clip_coef_kernel<<<1, 1, 0, scope.stream()>>>(n, sumsq, max_norm, out);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// x[i] *= (T) *coef, unless *coef >= 1 (then nothing is written).
template <class T>
static __global__ void scale_kernel(int64_t n, T *__restrict__ x, const double *__restrict__ coef) {
  const double c = *coef;
  if (c >= 1.0) return;
  const T ct = (T)c;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = Rn<T>::mul(x[i], ct);
}

static int ct_cuda_scale_by(ct_dtype dt, int64_t n, void *x, const double *coef,
                                ct_stream *s) {
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "ct_clip_grad_norm_: not supported for %s grads on cuda",
                   ct_dt_name(dt));
  if (n <= 0) return CT_OK;
  CtCudaScope scope;
  int rc = scope.enter(s);
  if (rc != CT_OK) return rc;
  if (dt == CT_F32)
    scale_kernel<float><<<ct_blocks_for(n, CT_THREADS), CT_THREADS, 0, scope.stream()>>>(
        n, static_cast<float *>(x), coef);
  else
    scale_kernel<double><<<ct_blocks_for(n, CT_THREADS), CT_THREADS, 0, scope.stream()>>>(
        n, static_cast<double *>(x), coef);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// ---- the family's table ------------------------------------------------------------------------
extern "C" const ct_optim_kernels ct_cuda_optim_kernels = {
    /* sgd_step              */ ct_cuda_sgd_step,
    /* adam_step             */ ct_cuda_adam_step,
    /* sum_squares_workspace */ ct_cuda_sum_squares_workspace,
    /* sum_squares           */ ct_cuda_sum_squares,
    /* clip_coef             */ ct_cuda_clip_coef,
    /* scale_by              */ ct_cuda_scale_by,
};
