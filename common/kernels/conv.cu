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
// Index arithmetic runs in int32 when every buffer of the call has fewer
// than 2^30 elements (divisions by the sizes are the kernels' main cost),
// else in int64. The order of every sum is fixed by the shape: the same
// input gives the same bits on every run.
#include <stdint.h>

#include "conv_kernels.h"
#include "kernel_util.cuh"

namespace {

constexpr int64_t kSmall = (int64_t)1 << 30; // int32 indexing below this many elements

inline bool fits32(int64_t n) { return n < kSmall; }

// Runs f(T{}) with T = float or double for dt; other dtypes fail.
template <class F> int dispatch_float(ct_dtype dt, const char *op, F &&f) {
  if (dt == CT_F32) return f(float{});
  if (dt == CT_F64) return f(double{});
  return ct_fail(CT_ERR_DTYPE, "%s: not implemented for %s on cuda (float32 and float64 are)", op,
                 ct_dt_name(dt));
}

template <class I> __device__ inline I grid_start() { return (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; }
template <class I> __device__ inline I grid_step() { return (I)gridDim.x * (I)blockDim.x; }

// ---- im2col / col2im ------------------------------------------------------------------------------
template <class T, class I>
__global__ void im2col_kernel(const T *__restrict__ x, T *__restrict__ cols, I C, I N, I H, I W, I k,
                              I s, I pad, I Ho, I Wo) {
  const I P = Ho * Wo, NP = N * P, total = C * NP;
  for (I i = grid_start<I>(); i < total; i += grid_step<I>()) {
    const I p = i % P, t = i / P, n = t % N, c = t / N;
    const I oh = p / Wo, ow = p % Wo;
    const I h0 = oh * s - pad, w0 = ow * s - pad;
    const T *src = x + (n * C + c) * H * W;
    T *dst = cols + c * k * k * NP + n * P + p;
    for (I a = 0; a < k; ++a) {
      const I ih = h0 + a;
      const bool row_in = ih >= 0 && ih < H;
      for (I b = 0; b < k; ++b) {
        const I iw = w0 + b;
        *dst = row_in && iw >= 0 && iw < W ? src[ih * W + iw] : T(0);
        dst += NP;
      }
    }
  }
}

template <class T, class I>
__global__ void col2im_kernel(const T *__restrict__ cols, T *__restrict__ dx, I C, I N, I H, I W, I k,
                              I s, I pad, I Ho, I Wo) {
  const I P = Ho * Wo, NP = N * P, total = N * C * H * W;
  for (I i = grid_start<I>(); i < total; i += grid_step<I>()) {
    const I w = i % W, t = i / W, h = t % H, t2 = t / H, c = t2 % C, n = t2 / C;
    T acc = T(0);
    for (I a = 0; a < k; ++a) {
      const I th = h + pad - a; // = oh * s
      if (th < 0 || th % s != 0) continue;
      const I oh = th / s;
      if (oh >= Ho) continue;
      for (I b = 0; b < k; ++b) {
        const I tw = w + pad - b;
        if (tw < 0 || tw % s != 0) continue;
        const I ow = tw / s;
        if (ow >= Wo) continue;
        acc += cols[((c * k + a) * k + b) * NP + n * P + oh * Wo + ow];
      }
    }
    dx[i] = acc;
  }
}

// ---- (N, C, P) -> (C, N, P) -----------------------------------------------------------------------
template <class T, class I>
__global__ void cnhw_from_nchw_kernel(const T *__restrict__ src, T *__restrict__ dst, I N, I C, I P) {
  const I total = N * C * P;
  for (I i = grid_start<I>(); i < total; i += grid_step<I>()) {
    const I e = i % P, t = i / P, n = t % N, c = t / N;
    dst[i] = src[(n * C + c) * P + e];
  }
}

// ---- max pooling ----------------------------------------------------------------------------------
template <class T, class I>
__global__ void maxpool_fwd_kernel(const T *__restrict__ x, T *__restrict__ y, int32_t *__restrict__ idx,
                                   I planes, I H, I W, I k, I s, I Ho, I Wo) {
  const I total = planes * Ho * Wo;
  for (I i = grid_start<I>(); i < total; i += grid_step<I>()) {
    const I ow = i % Wo, t = i / Wo, oh = t % Ho, q = t / Ho;
    const I h0 = oh * s, w0 = ow * s;
    const T *plane = x + q * H * W;
    T best = T(-INFINITY);
    I at = h0 * W + w0;
    for (I a = 0; a < k; ++a)
      for (I b = 0; b < k; ++b) {
        const I pos = (h0 + a) * W + w0 + b;
        const T v = plane[pos];
        if (v > best || v != v) { // greater, or NaN: torch's CPU rule
          best = v;
          at = pos;
        }
      }
    y[i] = best;
    if (idx) idx[i] = (int32_t)at;
  }
}

template <class T, class I>
__global__ void maxpool_bwd_kernel(const T *__restrict__ dy, const int32_t *__restrict__ idx,
                                   T *__restrict__ dx, I planes, I H, I W, I k, I s, I Ho, I Wo) {
  const I total = planes * H * W;
  for (I i = grid_start<I>(); i < total; i += grid_step<I>()) {
    const I w = i % W, t = i / W, h = t % H, q = t / H;
    // windows oh with oh*s <= h <= oh*s + k - 1
    const I oh_lo = h >= k ? (h - k) / s + 1 : 0, ow_lo = w >= k ? (w - k) / s + 1 : 0;
    const I oh_hi = h / s < Ho - 1 ? h / s : Ho - 1, ow_hi = w / s < Wo - 1 ? w / s : Wo - 1;
    const I me = h * W + w;
    const T *gq = dy + q * Ho * Wo;
    const int32_t *iq = idx + q * Ho * Wo;
    T acc = T(0);
    for (I oh = oh_lo; oh <= oh_hi; ++oh)
      for (I ow = ow_lo; ow <= ow_hi; ++ow)
        if ((I)iq[oh * Wo + ow] == me) acc += gq[oh * Wo + ow];
    dx[i] = acc;
  }
}

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

// y = (x - shift[c]) * a + bias[c], a = gamma[c] * invstd[c] (train) or
// gamma[c] / sqrt(var[c] + eps) (eval); in double, as the CPU.
template <class T, class I>
__global__ void bn_affine_kernel(const T *__restrict__ x, const T *__restrict__ shift,
                                 const T *__restrict__ scale, bool scale_is_var, double eps,
                                 const T *__restrict__ gamma, const T *__restrict__ beta,
                                 T *__restrict__ y, I N, I C, I P) {
  const I total = N * C * P;
  for (I i = grid_start<I>(); i < total; i += grid_step<I>()) {
    const I c = (i / P) % C;
    const double sc = scale_is_var ? 1.0 / sqrt((double)scale[c] + eps) : (double)scale[c];
    const double a = sc * (double)gamma[c];
    // __dmul_rn/__dadd_rn: nvcc would otherwise contract the product and the
    // sum into one FMA (one rounding), where cpu_conv.c (ISO C, no
    // contraction) rounds the product first; this keeps the CPU's bits.
    y[i] = (T)__dadd_rn(__dmul_rn((double)x[i] - (double)shift[c], a), (double)beta[c]);
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
static int ct_cuda_im2col(ct_dtype dt, const ct_conv_geom *g, const void *x, void *cols, ct_stream *s) {
  const int64_t work = g->c * g->n * g->ho * g->wo;
  if (work <= 0) return CT_OK;
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "Conv2d (im2col)", [&](auto tag) -> int {
    using T = decltype(tag);
    const unsigned blocks = ct_blocks_for(work, CT_THREADS);
    if (fits32(work * g->k * g->k) && fits32(g->n * g->c * g->h * g->w))
      im2col_kernel<T, int32_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(x), static_cast<T *>(cols), (int32_t)g->c, (int32_t)g->n,
          (int32_t)g->h, (int32_t)g->w, (int32_t)g->k, (int32_t)g->stride, (int32_t)g->pad,
          (int32_t)g->ho, (int32_t)g->wo);
    else
      im2col_kernel<T, int64_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(x), static_cast<T *>(cols), g->c, g->n, g->h, g->w, g->k,
          g->stride, g->pad, g->ho, g->wo);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int ct_cuda_col2im(ct_dtype dt, const ct_conv_geom *g, const void *cols, void *dx, ct_stream *s) {
  const int64_t work = g->n * g->c * g->h * g->w;
  if (work <= 0) return CT_OK;
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "Conv2d (col2im)", [&](auto tag) -> int {
    using T = decltype(tag);
    const unsigned blocks = ct_blocks_for(work, CT_THREADS);
    if (fits32(work) && fits32(g->c * g->k * g->k * g->n * g->ho * g->wo))
      col2im_kernel<T, int32_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(cols), static_cast<T *>(dx), (int32_t)g->c, (int32_t)g->n,
          (int32_t)g->h, (int32_t)g->w, (int32_t)g->k, (int32_t)g->stride, (int32_t)g->pad,
          (int32_t)g->ho, (int32_t)g->wo);
    else
      col2im_kernel<T, int64_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(cols), static_cast<T *>(dx), g->c, g->n, g->h, g->w, g->k,
          g->stride, g->pad, g->ho, g->wo);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int ct_cuda_cnhw_from_nchw(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src,
                                      void *dst, ct_stream *s) {
  const int64_t work = n * c * p;
  if (work <= 0) return CT_OK;
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "Conv2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const unsigned blocks = ct_blocks_for(work, CT_THREADS);
    if (fits32(work))
      cnhw_from_nchw_kernel<T, int32_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(src), static_cast<T *>(dst), (int32_t)n, (int32_t)c, (int32_t)p);
    else
      cnhw_from_nchw_kernel<T, int64_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(src), static_cast<T *>(dst), n, c, p);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int ct_cuda_maxpool_forward(ct_dtype dt, const ct_pool_geom *g, const void *x, void *y,
                                       int32_t *idx, ct_stream *s) {
  const int64_t work = g->planes * g->ho * g->wo;
  if (work <= 0) return CT_OK;
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "MaxPool2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const unsigned blocks = ct_blocks_for(work, CT_THREADS);
    if (fits32(g->planes * g->h * g->w))
      maxpool_fwd_kernel<T, int32_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(x), static_cast<T *>(y), idx, (int32_t)g->planes, (int32_t)g->h,
          (int32_t)g->w, (int32_t)g->k, (int32_t)g->stride, (int32_t)g->ho, (int32_t)g->wo);
    else
      maxpool_fwd_kernel<T, int64_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(x), static_cast<T *>(y), idx, g->planes, g->h, g->w, g->k,
          g->stride, g->ho, g->wo);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int ct_cuda_maxpool_backward(ct_dtype dt, const ct_pool_geom *g, const void *dy,
                                        const int32_t *idx, void *dx, ct_stream *s) {
  const int64_t work = g->planes * g->h * g->w;
  if (work <= 0) return CT_OK;
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "MaxPool2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const unsigned blocks = ct_blocks_for(work, CT_THREADS);
    if (fits32(work))
      maxpool_bwd_kernel<T, int32_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(dy), idx, static_cast<T *>(dx), (int32_t)g->planes, (int32_t)g->h,
          (int32_t)g->w, (int32_t)g->k, (int32_t)g->stride, (int32_t)g->ho, (int32_t)g->wo);
    else
      maxpool_bwd_kernel<T, int64_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(dy), idx, static_cast<T *>(dx), g->planes, g->h, g->w, g->k,
          g->stride, g->ho, g->wo);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int ct_cuda_bn_stats(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, double eps,
                                void *mean, void *invstd, void *running_mean, void *running_var,
                                double momentum, ct_stream *s) {
  if (c <= 0) return CT_OK;
  if (c > 0x7fffffff)
    return ct_fail(CT_ERR_VALUE, "BatchNorm2d: %lld channels exceed a CUDA grid", (long long)c);
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "BatchNorm2d", [&](auto tag) -> int {
    using T = decltype(tag);
    bn_stats_kernel<T><<<(unsigned)c, dim3(kBnX, kBnY), 0, scope.stream()>>>(
        static_cast<const T *>(x), n, c, p, eps, static_cast<T *>(mean), static_cast<T *>(invstd),
        static_cast<T *>(running_mean), static_cast<T *>(running_var), momentum);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int bn_affine(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, const void *shift,
                     const void *scale, bool scale_is_var, double eps, const void *gamma,
                     const void *beta, void *y, ct_stream *s) {
  const int64_t work = n * c * p;
  if (work <= 0) return CT_OK;
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "BatchNorm2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const unsigned blocks = ct_blocks_for(work, CT_THREADS);
    if (fits32(work))
      bn_affine_kernel<T, int32_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(x), static_cast<const T *>(shift), static_cast<const T *>(scale),
          scale_is_var, eps, static_cast<const T *>(gamma), static_cast<const T *>(beta),
          static_cast<T *>(y), (int32_t)n, (int32_t)c, (int32_t)p);
    else
      bn_affine_kernel<T, int64_t><<<blocks, CT_THREADS, 0, scope.stream()>>>(
          static_cast<const T *>(x), static_cast<const T *>(shift), static_cast<const T *>(scale),
          scale_is_var, eps, static_cast<const T *>(gamma), static_cast<const T *>(beta),
          static_cast<T *>(y), n, c, p);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

static int ct_cuda_bn_apply(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                                const void *mean, const void *invstd, const void *gamma,
                                const void *beta, void *y, ct_stream *s) {
  return bn_affine(dt, n, c, p, x, mean, invstd, false, 0.0, gamma, beta, y, s);
}

static int ct_cuda_bn_eval(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                               const void *running_mean, const void *running_var, double eps,
                               const void *gamma, const void *beta, void *y, ct_stream *s) {
  return bn_affine(dt, n, c, p, x, running_mean, running_var, true, eps, gamma, beta, y, s);
}

static int ct_cuda_bn_backward(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                                   const void *dy, const void *mean, const void *invstd,
                                   const void *gamma, void *dx, void *dgamma, void *dbeta,
                                   ct_stream *s) {
  if (c <= 0) return CT_OK;
  if (c > 0x7fffffff)
    return ct_fail(CT_ERR_VALUE, "BatchNorm2d: %lld channels exceed a CUDA grid", (long long)c);
  CtCudaScope scope;
  if (int rc = scope.enter(s)) return rc;
  return dispatch_float(dt, "BatchNorm2d", [&](auto tag) -> int {
    using T = decltype(tag);
    bn_backward_kernel<T><<<(unsigned)c, dim3(kBnX, kBnY), 0, scope.stream()>>>(
        static_cast<const T *>(x), static_cast<const T *>(dy), static_cast<const T *>(mean),
        static_cast<const T *>(invstd), static_cast<const T *>(gamma), static_cast<T *>(dx),
        static_cast<T *>(dgamma), static_cast<T *>(dbeta), n, c, p);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
}

// ---- the family's table ------------------------------------------------------------------------
extern "C" const ct_conv_kernels ct_cuda_conv_kernels = {
    /* im2col           */ ct_cuda_im2col,
    /* col2im           */ ct_cuda_col2im,
    /* cnhw_from_nchw   */ ct_cuda_cnhw_from_nchw,
    /* maxpool_forward  */ ct_cuda_maxpool_forward,
    /* maxpool_backward */ ct_cuda_maxpool_backward,
    /* bn_stats         */ ct_cuda_bn_stats,
    /* bn_apply         */ ct_cuda_bn_apply,
    /* bn_eval          */ ct_cuda_bn_eval,
    /* bn_backward      */ ct_cuda_bn_backward,
};
