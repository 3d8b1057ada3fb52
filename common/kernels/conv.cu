// SPDX-License-Identifier: MIT
//
// conv: im2col/col2im, max pooling and batch normalization on CUDA (see
// conv_kernels.h for what each loop computes).
//
// Every output element is written by exactly one thread, which gathers what
// it needs, so nothing is added concurrently and no atomics are needed:
//   im2col        a thread per (c, n, oh, ow) writes its k*k column entries
//                 (consecutive threads write consecutive addresses of a row);
//   col2im        a thread per input element sums the column entries that
//                 read it, (i, j) in ascending order, as the CPU does;
//   permute       a thread per destination element;
//   pool forward  a thread per output scans its window;
//   pool backward a thread per input element visits the windows that cover
//                 it (one when s >= k) and sums dy where the saved argmax is
//                 this element, in the CPU's order;
//   batch norm    a block of 32 x 16 threads per channel: x walks a plane's
//                 P values (coalesced), y walks the N images; sums in double
//                 (warp shuffles, then one warp over the 16 warps' results),
//                 two passes (mean, then squared deviations); the affine
//                 maps are grid-stride loops over elements.
// The grid-stride loops' per-element bodies and launchers live in conv.cuh,
// where the host test runs them too; this file keeps the batch-norm
// reductions (a block per channel) and the entries. The order of every sum is
// fixed by the shape: the same input gives the same bits on every run.
#include <stdint.h>

#include "conv.cuh"
#include "conv_kernels.h"
#include "kernel_util.cuh"

namespace {

// ---- batch normalization --------------------------------------------------------------------------
constexpr int kBnX = 32, kBnY = 16; // a block per channel: 32 along a plane, 16 over images

// The sum of v over the block, returned to every thread; sh holds 33 doubles.
__device__ inline double block_sum(double v, double *sh) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads(); // sh is free (a previous call has finished reading it)
  if ((tid & 31) == 0) sh[tid >> 5] = v;
  __syncthreads();
  if (tid < 32) {
    v = tid < (nt + 31) / 32 ? sh[tid] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (tid == 0) sh[32] = v;
  }
  __syncthreads();
  return sh[32];
}

template <class T>
__global__ void bn_stats_kernel(const T *__restrict__ x, int64_t N, int64_t C, int64_t P, double eps,
                                T *mean, T *invstd, T *rmean, T *rvar, double momentum) {
  __shared__ double sh[33];
  const int64_t c = blockIdx.x;
  const double M = (double)(N * P);
  double s = 0;
  for (int64_t n = threadIdx.y; n < N; n += blockDim.y) {
    const T *xp = x + (n * C + c) * P;
    for (int64_t e = threadIdx.x; e < P; e += blockDim.x) s += (double)xp[e];
  }
  const double mu = block_sum(s, sh) / M;
  double ss = 0;
  for (int64_t n = threadIdx.y; n < N; n += blockDim.y) {
    const T *xp = x + (n * C + c) * P;
    for (int64_t e = threadIdx.x; e < P; e += blockDim.x) {
      const double d = (double)xp[e] - mu;
      ss += d * d;
    }
  }
  ss = block_sum(ss, sh);
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    mean[c] = (T)mu;
    invstd[c] = (T)(1.0 / sqrt(ss / M + eps));
    if (rmean) {
      rmean[c] = (T)((1.0 - momentum) * (double)rmean[c] + momentum * mu);
      rvar[c] = (T)((1.0 - momentum) * (double)rvar[c] + momentum * (ss / (M - 1.0)));
    }
  }
}

// One block per channel: the two sums, then dx over the same values.
template <class T>
__global__ void bn_backward_kernel(const T *__restrict__ x, const T *__restrict__ dy,
                                   const T *__restrict__ mean, const T *__restrict__ invstd,
                                   const T *__restrict__ gamma, T *__restrict__ dx,
                                   T *__restrict__ dgamma, T *__restrict__ dbeta, int64_t N,
                                   int64_t C, int64_t P) {
  __shared__ double sh[33];
  const int64_t c = blockIdx.x;
  const double M = (double)(N * P), mu = (double)mean[c], is = (double)invstd[c];
  double a = 0, b = 0;
  for (int64_t n = threadIdx.y; n < N; n += blockDim.y) {
    const T *xp = x + (n * C + c) * P, *gp = dy + (n * C + c) * P;
    for (int64_t e = threadIdx.x; e < P; e += blockDim.x) {
      const double g = (double)gp[e];
      a += g;
      b += g * ((double)xp[e] - mu);
    }
  }
  const double sg = block_sum(a, sh);
  const double dg = block_sum(b, sh) * is;
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    dbeta[c] = (T)sg;
    dgamma[c] = (T)dg;
  }
  const double k = (double)gamma[c] * is, mg = sg / M, mx = dg / M * is;
  for (int64_t n = threadIdx.y; n < N; n += blockDim.y) {
    const T *xp = x + (n * C + c) * P, *gp = dy + (n * C + c) * P;
    T *op = dx + (n * C + c) * P;
    for (int64_t e = threadIdx.x; e < P; e += blockDim.x)
      op[e] = (T)(k * ((double)gp[e] - mg - ((double)xp[e] - mu) * mx));
  }
}

} // namespace

// ---- entries ----------------------------------------------------------------------------------------
static int cuda_im2col(ct_dtype dt, const cti_conv_geom *g, const void *x, void *cols, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_im2col_run(cti_device_exec{scope.stream()}, dt, g, x, cols);
}

static int cuda_col2im(ct_dtype dt, const cti_conv_geom *g, const void *cols, void *dx, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_col2im_run(cti_device_exec{scope.stream()}, dt, g, cols, dx);
}

static int cuda_cnhw_from_nchw(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src,
                                  void *dst, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_cnhw_run(cti_device_exec{scope.stream()}, dt, n, c, p, src, dst);
}

static int cuda_maxpool_forward(ct_dtype dt, const cti_pool_geom *g, const void *x, void *y,
                                   int32_t *idx, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_maxpool_forward_run(cti_device_exec{scope.stream()}, dt, g, x, y, idx);
}

static int cuda_maxpool_backward(ct_dtype dt, const cti_pool_geom *g, const void *dy,
                                    const int32_t *idx, void *dx, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_maxpool_backward_run(cti_device_exec{scope.stream()}, dt, g, dy, idx, dx);
}

static int cuda_bn_stats(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, double eps,
                                void *mean, void *invstd, void *running_mean, void *running_var,
                                double momentum, ct_stream *s) {
  if (c <= 0) return CT_OK;
  if (c > 0x7fffffff)
    return ct_fail(CT_ERR_VALUE, "BatchNorm2d: %lld channels exceed a CUDA grid", (long long)c);
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_float(dt, "BatchNorm2d", [&](auto tag) -> int {
    using T = decltype(tag);
    CT_LAUNCH(bn_stats_kernel<T>)((unsigned)c, dim3(kBnX, kBnY), 0, scope.stream())(
        static_cast<const T *>(x), n, c, p, eps, static_cast<T *>(mean), static_cast<T *>(invstd),
        static_cast<T *>(running_mean), static_cast<T *>(running_var), momentum);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int bn_affine(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, const void *shift,
                     const void *scale, bool scale_is_var, double eps, const void *gamma,
                     const void *beta, void *y, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_bn_affine_run(cti_device_exec{scope.stream()}, dt, n, c, p, x, shift, scale,
                          scale_is_var, eps, gamma, beta, y);
}

static int cuda_bn_apply(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                                const void *mean, const void *invstd, const void *gamma,
                                const void *beta, void *y, ct_stream *s) {
  return bn_affine(dt, n, c, p, x, mean, invstd, false, 0.0, gamma, beta, y, s);
}

static int cuda_bn_eval(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                               const void *running_mean, const void *running_var, double eps,
                               const void *gamma, const void *beta, void *y, ct_stream *s) {
  return bn_affine(dt, n, c, p, x, running_mean, running_var, true, eps, gamma, beta, y, s);
}

static int cuda_bn_backward(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                                   const void *dy, const void *mean, const void *invstd,
                                   const void *gamma, void *dx, void *dgamma, void *dbeta,
                                   ct_stream *s) {
  if (c <= 0) return CT_OK;
  if (c > 0x7fffffff)
    return ct_fail(CT_ERR_VALUE, "BatchNorm2d: %lld channels exceed a CUDA grid", (long long)c);
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_float(dt, "BatchNorm2d", [&](auto tag) -> int {
    using T = decltype(tag);
    CT_LAUNCH(bn_backward_kernel<T>)((unsigned)c, dim3(kBnX, kBnY), 0, scope.stream())(
        static_cast<const T *>(x), static_cast<const T *>(dy), static_cast<const T *>(mean),
        static_cast<const T *>(invstd), static_cast<const T *>(gamma), static_cast<T *>(dx),
        static_cast<T *>(dgamma), static_cast<T *>(dbeta), n, c, p);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

// ---- the family's table ------------------------------------------------------------------------
// In the family list's order (nvcc's C++17 has no designated initializers),
// so the order cannot drift from the table's: each entry is the static cuda_<entry>.
#define CTI_OP_CUDA_PREFIX cuda_
extern "C" const cti_conv_kernels cti_cuda_conv_kernels = {CTI_CONV_OPS(CTI_OP_CUDA_INIT)};
