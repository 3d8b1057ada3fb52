// SPDX-License-Identifier: MIT
//
// conv.cuh: the per-element bodies of conv.cu's grid-stride loops (im2col,
// col2im, the NCHW -> CNHW permute, max pooling forward and backward, the
// batch-norm affine map) and their launchers, templated on the executor
// (kernel_util.cuh): conv.cu runs them on the GPU, the host test
// (tests/crossdev/test_kernels_host.cu) runs the same code on the CPU.
//
// Invariant: body(i) writes output element i alone and reads only inputs,
// gathering what it needs in a fixed order (see conv_kernels.h for what each
// computes), so the order of i does not matter and nothing is added
// concurrently. Index arithmetic runs in int32 when every buffer of the call
// has fewer than 2^30 elements (divisions by the sizes are the kernels' main
// cost), else in int64.
#ifndef CT_CONV_CUH
#define CT_CONV_CUH

#include <stdint.h>

#include "conv_kernels.h"
#include "kernel_util.cuh"

constexpr int64_t kCtConvSmall = (int64_t)1 << 30; // int32 indexing below this many elements

inline bool cti_conv_fits32(int64_t n) { return n < kCtConvSmall; }

// Loops that only move elements (im2col, the permute) run for float16 and
// bfloat16 too, on their 16-bit patterns: f(uint16_t{}) for those, else as
// cti_dispatch_float.
template <class F> inline int cti_dispatch_moves(ct_dtype dt, const char *op, F &&f) {
  if (dt == CT_F16 || dt == CT_BF16) return f(uint16_t{});
  return cti_dispatch_float(dt, op, f);
}

// Max pooling compares and sums: float16 and bfloat16 in float
// (cti_pool_math), f(__half{}) / f(__nv_bfloat16{}) for those, else as
// cti_dispatch_float.
template <class F> inline int cti_dispatch_pool(ct_dtype dt, const char *op, F &&f) {
  if (dt == CT_F16) return f(__half{});
  if (dt == CT_BF16) return f(__nv_bfloat16{});
  return cti_dispatch_float(dt, op, f);
}

// Storage type T -> the type max pooling compares and sums in (C), and back
// (rounded to nearest even): the identity for float and double.
template <class T> struct cti_pool_math {
  using C = T;
  __host__ __device__ static C load(T v) { return v; }
  __host__ __device__ static T store(C v) { return v; }
};
template <> struct cti_pool_math<__half> {
  using C = float;
  __host__ __device__ static C load(__half v) { return __half2float(v); }
  __host__ __device__ static __half store(C v) { return __float2half_rn(v); }
};
template <> struct cti_pool_math<__nv_bfloat16> {
  using C = float;
  __host__ __device__ static C load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __host__ __device__ static __nv_bfloat16 store(C v) { return __float2bfloat16_rn(v); }
};

// ---- im2col / col2im ------------------------------------------------------------------------------
// Element i = (c, n, p) of the output (C, N, Ho*Wo) writes its k*k column
// entries cols[(c*k + a)*k + b][n*P + p] (consecutive i: consecutive addresses).
template <class T, class I> struct cti_im2col_op {
  const T *x; // (N, C, H, W)
  T *cols;    // (C*k*k, N*Ho*Wo)
  I C, N, H, W, k, s, pad, Ho, Wo;
  __host__ __device__ void operator()(I i) const {
    const I P = Ho * Wo, NP = N * P;
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
};

// Element i = (n, c, h, w) of dx sums the column entries that read it, (a, b)
// in ascending order, as the CPU does.
template <class T, class I> struct cti_col2im_op {
  const T *cols; // (C*k*k, N*Ho*Wo)
  T *dx;         // (N, C, H, W)
  I C, N, H, W, k, s, pad, Ho, Wo;
  __host__ __device__ void operator()(I i) const {
    const I P = Ho * Wo, NP = N * P;
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
};

template <template <class, class> class Op, class T, class I>
inline Op<T, I> cti_conv_op(const cti_conv_geom *g, const void *in, void *out) {
  return Op<T, I>{static_cast<const T *>(in), static_cast<T *>(out), (I)g->c, (I)g->n, (I)g->h,
                  (I)g->w, (I)g->k, (I)g->stride, (I)g->pad, (I)g->ho, (I)g->wo};
}

template <class X>
int cti_im2col_run(const X &x, ct_dtype dt, const cti_conv_geom *g, const void *src, void *cols) {
  const int64_t work = g->c * g->n * g->ho * g->wo;
  if (work <= 0) return CT_OK;
  return cti_dispatch_moves(dt, "Conv2d (im2col)", [&](auto tag) -> int {
    using T = decltype(tag);
    if (cti_conv_fits32(work * g->k * g->k) && cti_conv_fits32(g->n * g->c * g->h * g->w))
      return x.run((int32_t)work, cti_conv_op<cti_im2col_op, T, int32_t>(g, src, cols));
    return x.run(work, cti_conv_op<cti_im2col_op, T, int64_t>(g, src, cols));
  });
}

template <class X>
int cti_col2im_run(const X &x, ct_dtype dt, const cti_conv_geom *g, const void *cols, void *dx) {
  const int64_t work = g->n * g->c * g->h * g->w;
  if (work <= 0) return CT_OK;
  return cti_dispatch_float(dt, "Conv2d (col2im)", [&](auto tag) -> int {
    using T = decltype(tag);
    if (cti_conv_fits32(work) && cti_conv_fits32(g->c * g->k * g->k * g->n * g->ho * g->wo))
      return x.run((int32_t)work, cti_conv_op<cti_col2im_op, T, int32_t>(g, cols, dx));
    return x.run(work, cti_conv_op<cti_col2im_op, T, int64_t>(g, cols, dx));
  });
}

// ---- (N, C, P) -> (C, N, P) -----------------------------------------------------------------------
template <class T, class I> struct cti_cnhw_op {
  const T *src; // (N, C, P)
  T *dst;       // (C, N, P)
  I N, C, P;
  __host__ __device__ void operator()(I i) const {
    const I e = i % P, t = i / P, n = t % N, c = t / N;
    dst[i] = src[(n * C + c) * P + e];
  }
};

template <class X>
int cti_cnhw_run(const X &x, ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src,
                void *dst) {
  const int64_t work = n * c * p;
  if (work <= 0) return CT_OK;
  return cti_dispatch_moves(dt, "Conv2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const T *s = static_cast<const T *>(src);
    T *d = static_cast<T *>(dst);
    if (cti_conv_fits32(work))
      return x.run((int32_t)work, cti_cnhw_op<T, int32_t>{s, d, (int32_t)n, (int32_t)c, (int32_t)p});
    return x.run(work, cti_cnhw_op<T, int64_t>{s, d, n, c, p});
  });
}

// ---- max pooling ----------------------------------------------------------------------------------
// Output i = (q, oh, ow) scans its window: a value replaces the best when
// greater or NaN (torch's CPU rule), so the first of equal maxima wins; y
// copies the winning element.
template <class T, class I> struct cti_maxpool_fwd_op {
  using M = cti_pool_math<T>;
  const T *x;   // (planes, H, W)
  T *y;         // (planes, Ho, Wo)
  int32_t *idx; // (planes, Ho, Wo) or NULL
  I H, W, k, s, Ho, Wo;
  __host__ __device__ void operator()(I i) const {
    const I ow = i % Wo, t = i / Wo, oh = t % Ho, q = t / Ho;
    const I h0 = oh * s, w0 = ow * s;
    const T *plane = x + q * H * W;
    typename M::C best = typename M::C(-INFINITY);
    I at = h0 * W + w0;
    for (I a = 0; a < k; ++a)
      for (I b = 0; b < k; ++b) {
        const I pos = (h0 + a) * W + w0 + b;
        const typename M::C v = M::load(plane[pos]);
        if (v > best || v != v) {
          best = v;
          at = pos;
        }
      }
    y[i] = plane[at];
    if (idx) idx[i] = (int32_t)at;
  }
};

// Input element i = (q, h, w) visits the windows that cover it (one when
// s >= k) and sums dy where the saved argmax is this element, in the CPU's
// order (oh, then ow, ascending), in float for float16 and bfloat16, rounded
// once.
template <class T, class I> struct cti_maxpool_bwd_op {
  using M = cti_pool_math<T>;
  const T *dy;        // (planes, Ho, Wo)
  const int32_t *idx; // (planes, Ho, Wo)
  T *dx;              // (planes, H, W)
  I H, W, k, s, Ho, Wo;
  __host__ __device__ void operator()(I i) const {
    const I w = i % W, t = i / W, h = t % H, q = t / H;
    // windows oh with oh*s <= h <= oh*s + k - 1
    const I oh_lo = h >= k ? (h - k) / s + 1 : 0, ow_lo = w >= k ? (w - k) / s + 1 : 0;
    const I oh_hi = h / s < Ho - 1 ? h / s : Ho - 1, ow_hi = w / s < Wo - 1 ? w / s : Wo - 1;
    const I me = h * W + w;
    const T *gq = dy + q * Ho * Wo;
    const int32_t *iq = idx + q * Ho * Wo;
    typename M::C acc = typename M::C(0);
    for (I oh = oh_lo; oh <= oh_hi; ++oh)
      for (I ow = ow_lo; ow <= ow_hi; ++ow)
        if ((I)iq[oh * Wo + ow] == me) acc += M::load(gq[oh * Wo + ow]);
    dx[i] = M::store(acc);
  }
};

template <class X>
int cti_maxpool_forward_run(const X &x, ct_dtype dt, const cti_pool_geom *g, const void *src,
                           void *y, int32_t *idx) {
  const int64_t work = g->planes * g->ho * g->wo;
  if (work <= 0) return CT_OK;
  return cti_dispatch_pool(dt, "MaxPool2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const T *s = static_cast<const T *>(src);
    T *d = static_cast<T *>(y);
    if (cti_conv_fits32(g->planes * g->h * g->w))
      return x.run((int32_t)work, cti_maxpool_fwd_op<T, int32_t>{
                                      s, d, idx, (int32_t)g->h, (int32_t)g->w, (int32_t)g->k,
                                      (int32_t)g->stride, (int32_t)g->ho, (int32_t)g->wo});
    return x.run(work, cti_maxpool_fwd_op<T, int64_t>{s, d, idx, g->h, g->w, g->k, g->stride, g->ho,
                                                     g->wo});
  });
}

template <class X>
int cti_maxpool_backward_run(const X &x, ct_dtype dt, const cti_pool_geom *g, const void *dy,
                            const int32_t *idx, void *dx) {
  const int64_t work = g->planes * g->h * g->w;
  if (work <= 0) return CT_OK;
  return cti_dispatch_pool(dt, "MaxPool2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const T *s = static_cast<const T *>(dy);
    T *d = static_cast<T *>(dx);
    if (cti_conv_fits32(work))
      return x.run((int32_t)work, cti_maxpool_bwd_op<T, int32_t>{
                                      s, idx, d, (int32_t)g->h, (int32_t)g->w, (int32_t)g->k,
                                      (int32_t)g->stride, (int32_t)g->ho, (int32_t)g->wo});
    return x.run(work, cti_maxpool_bwd_op<T, int64_t>{s, idx, d, g->h, g->w, g->k, g->stride, g->ho,
                                                     g->wo});
  });
}

// ---- batch normalization's affine map -------------------------------------------------------------
// y = (x - shift[c]) * a + bias[c], a = gamma[c] * invstd[c] (train) or
// gamma[c] / sqrt(var[c] + eps) (eval); in double, the product rounded before
// the sum, as cpu_conv.c.
template <class T, class I> struct cti_bn_affine_op {
  const T *x, *shift, *scale, *gamma, *beta; // x (N, C, P); the others (C,)
  T *y;                                      // (N, C, P)
  bool scale_is_var;
  double eps;
  I C, P;
  __host__ __device__ void operator()(I i) const {
    const I c = (i / P) % C;
    const double sc = scale_is_var ? 1.0 / sqrt((double)scale[c] + eps) : (double)scale[c];
    const double a = sc * (double)gamma[c];
    y[i] = (T)cti_rn<double>::add(cti_rn<double>::mul((double)x[i] - (double)shift[c], a),
                                 (double)beta[c]);
  }
};

// train: shift = mean, scale = invstd; eval: shift = running_mean, scale =
// running_var with scale_is_var.
template <class X>
int cti_bn_affine_run(const X &x, ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src,
                     const void *shift, const void *scale, bool scale_is_var, double eps,
                     const void *gamma, const void *beta, void *y) {
  const int64_t work = n * c * p;
  if (work <= 0) return CT_OK;
  return cti_dispatch_float(dt, "BatchNorm2d", [&](auto tag) -> int {
    using T = decltype(tag);
    const T *xs = static_cast<const T *>(src), *sh = static_cast<const T *>(shift),
            *sc = static_cast<const T *>(scale), *ga = static_cast<const T *>(gamma),
            *be = static_cast<const T *>(beta);
    T *yd = static_cast<T *>(y);
    if (cti_conv_fits32(work))
      return x.run((int32_t)work, cti_bn_affine_op<T, int32_t>{xs, sh, sc, ga, be, yd, scale_is_var,
                                                              eps, (int32_t)c, (int32_t)p});
    return x.run(work, cti_bn_affine_op<T, int64_t>{xs, sh, sc, ga, be, yd, scale_is_var, eps, c, p});
  });
}

#endif
