// SPDX-License-Identifier: MIT
//
// cpu_conv: im2col/col2im, max pooling and batch normalization on the host
// (see conv_kernels.h for what each loop computes).
//
// Each loop is split over whole output rows or planes: one thread writes an
// output element, always in the same order, so results never depend on the
// number of OpenMP threads (col2im and the pooling backward sum into a plane
// that only their thread touches). Batch-norm statistics are sums in double
// over one channel at a time (omp simd reductions: vectorized, in an order
// fixed by the build, not by the thread count). Below CT_CPU_PAR_MIN elements
// a loop stays on the calling thread.
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_kernels.h"
#include "cpu_kernels.h"
#include "error.h"

static int unsupported(const char *op, ct_dtype dt) {
  return ct_fail(CT_ERR_DTYPE, "%s: not implemented for %s on cpu (float32 and float64 are)", op,
                 ct_dtype_valid(dt) ? ct_dtype_name(dt) : "an invalid dtype");
}

// The output columns ow in [*lo, *hi) whose input column ow*s - p + j lies
// inside [0, w); the others read the zero padding.
static inline void valid_range(int64_t w, int64_t wo, int64_t s, int64_t p, int64_t j,
                               int64_t *lo, int64_t *hi) {
  const int64_t a = p - j; // ow*s >= a
  int64_t l = a <= 0 ? 0 : (a + s - 1) / s;
  const int64_t b = w - 1 + p - j; // ow*s <= b
  int64_t h = b < 0 ? 0 : b / s + 1;
  if (h > wo) h = wo;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

// ---- im2col ------------------------------------------------------------------------------------
// One task per (row r of cols, image n): Ho*Wo contiguous outputs.
#define IM2COL(SUF, T)                                                                   \
  static void im2col_##SUF(const cti_conv_geom *g, const T *x, T *cols) {                 \
    const int64_t k = g->k, s = g->stride, p = g->pad, H = g->h, W = g->w;               \
    const int64_t Ho = g->ho, Wo = g->wo, P = Ho * Wo, N = g->n, rows = g->c * k * k;    \
    const int64_t ntask = rows * N;                                                      \
    _Pragma("omp parallel for if (ntask * P >= CT_CPU_PAR_MIN) schedule(static)")        \
    for (int64_t t = 0; t < ntask; ++t) {                                                \
      const int64_t r = t / N, n = t % N;                                                \
      const int64_t c = r / (k * k), i = (r / k) % k, j = r % k;                          \
      const T *src = x + (n * g->c + c) * H * W;                                          \
      T *dst = cols + r * (N * P) + n * P;                                               \
      int64_t lo, hi;                                                                    \
      valid_range(W, Wo, s, p, j, &lo, &hi);                                             \
      for (int64_t oh = 0; oh < Ho; ++oh) {                                              \
        const int64_t ih = oh * s - p + i;                                               \
        T *row = dst + oh * Wo;                                                          \
        if (ih < 0 || ih >= H) {                                                         \
          for (int64_t ow = 0; ow < Wo; ++ow) row[ow] = 0;                               \
          continue;                                                                      \
        }                                                                                \
        const T *in = src + ih * W - p + j; /* in[ow*s] is column ow's input */          \
        for (int64_t ow = 0; ow < lo; ++ow) row[ow] = 0;                                 \
        if (s == 1) /* memcpy: a plain loop stays scalar, as row may alias in */        \
          memcpy(row + lo, in + lo, (size_t)(hi - lo) * sizeof(T));                      \
        else                                                                             \
          for (int64_t ow = lo; ow < hi; ++ow) row[ow] = in[ow * s];                     \
        for (int64_t ow = hi; ow < Wo; ++ow) row[ow] = 0;                                \
      }                                                                                  \
    }                                                                                    \
  }
IM2COL(f32, float)
IM2COL(f64, double)
IM2COL(u16, uint16_t) // float16 / bfloat16: only moved (and 0 bits are +0.0)

static int im2col(ct_dtype dt, const cti_conv_geom *g, const void *x, void *cols, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: im2col_f32(g, x, cols); return CT_OK;
  case CT_F64: im2col_f64(g, x, cols); return CT_OK;
  case CT_F16:
  case CT_BF16: im2col_u16(g, x, cols); return CT_OK;
  default: return unsupported("Conv2d (im2col)", dt);
  }
}

// ---- col2im ------------------------------------------------------------------------------------
// One task per input plane (n, c): zero it, then add the k*k rows of cols
// that read it, in a fixed order.
#define COL2IM(SUF, T)                                                                   \
  static void col2im_##SUF(const cti_conv_geom *g, const T *cols, T *dx) {                \
    const int64_t k = g->k, s = g->stride, p = g->pad, H = g->h, W = g->w;               \
    const int64_t Ho = g->ho, Wo = g->wo, P = Ho * Wo, N = g->n, C = g->c;               \
    const int64_t ntask = N * C;                                                         \
    _Pragma("omp parallel for if (ntask * H * W >= CT_CPU_PAR_MIN) schedule(static)")    \
    for (int64_t t = 0; t < ntask; ++t) {                                                \
      const int64_t n = t / C, c = t % C;                                                \
      T *plane = dx + t * H * W;                                                         \
      for (int64_t e = 0; e < H * W; ++e) plane[e] = 0;                                  \
      for (int64_t i = 0; i < k; ++i)                                                    \
        for (int64_t j = 0; j < k; ++j) {                                                \
          const int64_t r = (c * k + i) * k + j;                                         \
          const T *src = cols + r * (N * P) + n * P;                                     \
          int64_t lo, hi;                                                                \
          valid_range(W, Wo, s, p, j, &lo, &hi);                                         \
          for (int64_t oh = 0; oh < Ho; ++oh) {                                          \
            const int64_t ih = oh * s - p + i;                                           \
            if (ih < 0 || ih >= H) continue;                                             \
            /* restrict: cols and dx never overlap, so the sums vectorize */              \
            T *restrict out = plane + ih * W - p + j;                                    \
            const T *restrict row = src + oh * Wo;                                       \
            if (s == 1)                                                                  \
              for (int64_t ow = lo; ow < hi; ++ow) out[ow] += row[ow];                   \
            else                                                                         \
              for (int64_t ow = lo; ow < hi; ++ow) out[ow * s] += row[ow];               \
          }                                                                              \
        }                                                                                \
    }                                                                                    \
  }
COL2IM(f32, float)
COL2IM(f64, double)

static int col2im(ct_dtype dt, const cti_conv_geom *g, const void *cols, void *dx, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: col2im_f32(g, cols, dx); return CT_OK;
  case CT_F64: col2im_f64(g, cols, dx); return CT_OK;
  default: return unsupported("Conv2d (col2im)", dt);
  }
}

// ---- (N, C, P) -> (C, N, P) ------------------------------------------------------------------
#define PERMUTE(SUF, T)                                                                   \
  static void cnhw_from_nchw_##SUF(int64_t N, int64_t C, int64_t P, const T *src, T *dst) { \
    _Pragma("omp parallel for if (N * C * P >= CT_CPU_PAR_MIN) schedule(static)")         \
    for (int64_t t = 0; t < N * C; ++t) {                                                 \
      const int64_t c = t / N, n = t % N;                                                 \
      memcpy(dst + t * P, src + (n * C + c) * P, (size_t)P * sizeof(T));                  \
    }                                                                                     \
  }
PERMUTE(f32, float)
PERMUTE(f64, double)
PERMUTE(u16, uint16_t) // float16 / bfloat16

static int cnhw_from_nchw(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src,
                          void *dst, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: cnhw_from_nchw_f32(n, c, p, src, dst); return CT_OK;
  case CT_F64: cnhw_from_nchw_f64(n, c, p, src, dst); return CT_OK;
  case CT_F16:
  case CT_BF16: cnhw_from_nchw_u16(n, c, p, src, dst); return CT_OK;
  default: return unsupported("Conv2d", dt);
  }
}

// One output row of 2x2 / stride-2 pooling, vectorizable: the maximum by
// selects, then the first position holding it (the first of equal maxima,
// as the scan). A NaN breaks both steps, so a row with one returns false and
// the caller redoes it with the scan.
#define POOL2_ROW(SUF, T)                                                                  \
  static bool pool2_row_##SUF(const T *r0, int64_t W, int64_t Wo, int64_t base, T *yr,     \
                              int32_t *ir) {                                               \
    const T *r1 = r0 + W;                                                                  \
    int nan = 0;                                                                           \
    _Pragma("omp simd reduction(| : nan)")                                                 \
    for (int64_t ow = 0; ow < Wo; ++ow) {                                                  \
      const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];      \
      nan |= (a != a) | (b != b) | (c != c) | (d != d);                                    \
      const T ab = b > a ? b : a, cd = d > c ? d : c, m = cd > ab ? cd : ab;               \
      yr[ow] = m;                                                                          \
    }                                                                                      \
    if (nan) return false;                                                                 \
    if (ir) {                                                                              \
      const int32_t w1 = (int32_t)W, b0 = (int32_t)base;                                   \
      _Pragma("omp simd")                                                                  \
      for (int64_t ow = 0; ow < Wo; ++ow) {                                                \
        const T m = yr[ow];                                                                \
        /* 0 if a holds m, else 1 if b does, else W if c does, else W + 1 */               \
        const int32_t na = r0[2 * ow] != m, nb = r0[2 * ow + 1] != m, nc = r1[2 * ow] != m; \
        ir[ow] = b0 + 2 * (int32_t)ow + na * (nb * (w1 + nc - 1) + 1);                     \
      }                                                                                    \
    }                                                                                      \
    return true;                                                                           \
  }
POOL2_ROW(f32, float)
POOL2_ROW(f64, double)

// ---- max pooling ------------------------------------------------------------------------------
// One task per (plane, output row). The 2x2 stride-2 window (the common
// case) has its own loop for float32 and float64; the rule is the same:
// greater or NaN replaces, compared in the compute type (float for float16
// and bfloat16), and the output copies the winning element.
#define MAXPOOL_ROW(SUF)                                                                   \
  static void maxpool_row_##SUF(const cti_pool_geom *g, const ST_##SUF *plane, int64_t oh,  \
                                ST_##SUF *yr, int32_t *ir) {                               \
    const int64_t k = g->k, s = g->stride, W = g->w;                                       \
    for (int64_t ow = 0; ow < g->wo; ++ow) {                                               \
      const int64_t h0 = oh * s, w0 = ow * s;                                              \
      CT_##SUF best = (CT_##SUF)-INFINITY;                                                 \
      int64_t at = h0 * W + w0;                                                            \
      for (int64_t i = 0; i < k; ++i) {                                                    \
        const ST_##SUF *row = plane + (h0 + i) * W + w0;                                   \
        for (int64_t j = 0; j < k; ++j) {                                                  \
          const CT_##SUF v = LD_##SUF(row[j]);                                             \
          if (v > best || v != v) {                                                        \
            best = v;                                                                      \
            at = (h0 + i) * W + w0 + j;                                                    \
          }                                                                                \
        }                                                                                  \
      }                                                                                    \
      yr[ow] = plane[at];                                                                  \
      if (ir) ir[ow] = (int32_t)at;                                                        \
    }                                                                                      \
  }
// FAST: an expression that does the row with a faster loop (true) or not.
#define MAXPOOL_FWD(SUF, FAST)                                                             \
  MAXPOOL_ROW(SUF)                                                                         \
  static void maxpool_fwd_##SUF(const cti_pool_geom *g, const ST_##SUF *x, ST_##SUF *y,     \
                                int32_t *idx) {                                            \
    const int64_t H = g->h, W = g->w, Ho = g->ho, Wo = g->wo, ntask = g->planes * Ho;      \
    _Pragma("omp parallel for if (g->planes * H * W >= CT_CPU_PAR_MIN) schedule(static)")  \
    for (int64_t t = 0; t < ntask; ++t) {                                                  \
      const int64_t oh = t % Ho;                                                           \
      const ST_##SUF *plane = x + (t / Ho) * H * W;                                        \
      ST_##SUF *yr = y + t * Wo;                                                           \
      int32_t *ir = idx ? idx + t * Wo : NULL;                                             \
      if (!(FAST)) maxpool_row_##SUF(g, plane, oh, yr, ir);                                \
    }                                                                                      \
  }
#define POOL2_FAST(SUF) \
  (g->k == 2 && g->stride == 2 && pool2_row_##SUF(plane + 2 * oh * W, W, Wo, 2 * oh * W, yr, ir))
MAXPOOL_FWD(f32, POOL2_FAST(f32))
MAXPOOL_FWD(f64, POOL2_FAST(f64))
MAXPOOL_FWD(f16, false)
MAXPOOL_FWD(bf16, false)

// Backward, float32 and float64: each plane's dx zeroed, then every dy added
// at its argmax, in output order.
#define MAXPOOL_BWD(SUF, T)                                                                \
  static void maxpool_bwd_##SUF(const cti_pool_geom *g, const T *dy, const int32_t *idx,    \
                                T *dx) {                                                   \
    const int64_t HW = g->h * g->w, O = g->ho * g->wo;                                     \
    _Pragma("omp parallel for if (g->planes * HW >= CT_CPU_PAR_MIN) schedule(static)")     \
    for (int64_t q = 0; q < g->planes; ++q) {                                              \
      T *plane = dx + q * HW;                                                              \
      const T *gq = dy + q * O;                                                            \
      const int32_t *iq = idx + q * O;                                                     \
      for (int64_t e = 0; e < HW; ++e) plane[e] = 0;                                       \
      for (int64_t o = 0; o < O; ++o) plane[iq[o]] += gq[o];                               \
    }                                                                                      \
  }
MAXPOOL_BWD(f32, float)
MAXPOOL_BWD(f64, double)

// Backward, float16 and bfloat16: each input element sums, in float and in
// output order, the dy of the windows whose argmax it is, and is rounded
// once (what the CUDA functor in kernels/conv.cuh does, element for element:
// the same bits on both devices).
static void maxpool_bwd_half(const cti_pool_geom *g, const uint16_t *dy, const int32_t *idx, uint16_t *dx,
                             bool bf16) {
  const int64_t H = g->h, W = g->w, k = g->k, s = g->stride, Ho = g->ho, Wo = g->wo;
#pragma omp parallel for if (g->planes * H * W >= CT_CPU_PAR_MIN) schedule(static)
  for (int64_t i = 0; i < g->planes * H * W; ++i) {
    const int64_t w = i % W, h = (i / W) % H, q = i / (H * W);
    const int64_t oh_lo = h >= k ? (h - k) / s + 1 : 0, ow_lo = w >= k ? (w - k) / s + 1 : 0;
    const int64_t oh_hi = h / s < Ho - 1 ? h / s : Ho - 1, ow_hi = w / s < Wo - 1 ? w / s : Wo - 1;
    const uint16_t *gq = dy + q * Ho * Wo;
    const int32_t *iq = idx + q * Ho * Wo;
    float acc = 0;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow)
        if (iq[oh * Wo + ow] == h * W + w)
          acc += bf16 ? cti_cpu_bf16_to_f32(gq[oh * Wo + ow]) : cti_cpu_f16_to_f32(gq[oh * Wo + ow]);
    dx[i] = bf16 ? cti_cpu_f32_to_bf16(acc) : cti_cpu_f32_to_f16(acc);
  }
}

static int maxpool_forward(ct_dtype dt, const cti_pool_geom *g, const void *x, void *y,
                           int32_t *idx, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: maxpool_fwd_f32(g, x, y, idx); return CT_OK;
  case CT_F64: maxpool_fwd_f64(g, x, y, idx); return CT_OK;
  case CT_F16: maxpool_fwd_f16(g, x, y, idx); return CT_OK;
  case CT_BF16: maxpool_fwd_bf16(g, x, y, idx); return CT_OK;
  default: return unsupported("MaxPool2d", dt);
  }
}

static int maxpool_backward(ct_dtype dt, const cti_pool_geom *g, const void *dy,
                            const int32_t *idx, void *dx, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: maxpool_bwd_f32(g, dy, idx, dx); return CT_OK;
  case CT_F64: maxpool_bwd_f64(g, dy, idx, dx); return CT_OK;
  case CT_F16:
  case CT_BF16: maxpool_bwd_half(g, dy, idx, dx, dt == CT_BF16); return CT_OK;
  default: return unsupported("MaxPool2d", dt);
  }
}

// ---- batch normalization ------------------------------------------------------------------------
// Statistics: one task per channel, two passes over its N planes of P values.
#define BN(SUF, T)                                                                           \
  static void bn_stats_##SUF(int64_t N, int64_t C, int64_t P, const T *x, double eps, T *mean,  \
                             T *invstd, T *rmean, T *rvar, double momentum) {                \
    const double M = (double)(N * P);                                                        \
    _Pragma("omp parallel for if (N * C * P >= CT_CPU_PAR_MIN) schedule(static)")            \
    for (int64_t c = 0; c < C; ++c) {                                                        \
      double sum = 0;                                                                        \
      for (int64_t n = 0; n < N; ++n) {                                                      \
        const T *xp = x + (n * C + c) * P;                                                   \
        double part = 0;                                                                     \
        _Pragma("omp simd reduction(+ : part)")                                              \
        for (int64_t e = 0; e < P; ++e) part += (double)xp[e];                               \
        sum += part;                                                                         \
      }                                                                                      \
      const double mu = sum / M;                                                             \
      double ss = 0;                                                                         \
      for (int64_t n = 0; n < N; ++n) {                                                      \
        const T *xp = x + (n * C + c) * P;                                                   \
        double part = 0;                                                                     \
        _Pragma("omp simd reduction(+ : part)")                                              \
        for (int64_t e = 0; e < P; ++e) {                                                    \
          const double d = (double)xp[e] - mu;                                               \
          part += d * d;                                                                     \
        }                                                                                    \
        ss += part;                                                                          \
      }                                                                                      \
      const double var = ss / M;                                                             \
      mean[c] = (T)mu;                                                                       \
      invstd[c] = (T)(1.0 / sqrt(var + eps));                                                \
      if (rmean) {                                                                           \
        rmean[c] = (T)((1.0 - momentum) * (double)rmean[c] + momentum * mu);                 \
        rvar[c] = (T)((1.0 - momentum) * (double)rvar[c] + momentum * (ss / (M - 1.0)));     \
      }                                                                                      \
    }                                                                                        \
  }                                                                                          \
  /* y = (x - shift) * a + b per channel, in double */                                       \
  static void bn_affine_##SUF(int64_t N, int64_t C, int64_t P, const T *x, const double *sh, \
                              const double *a, const double *b, T *y) {                      \
    _Pragma("omp parallel for if (N * C * P >= CT_CPU_PAR_MIN) schedule(static)")            \
    for (int64_t t = 0; t < N * C; ++t) {                                                    \
      const int64_t c = t % C;                                                               \
      const double s0 = sh[c], a0 = a[c], b0 = b[c];                                         \
      const T *xp = x + t * P;                                                               \
      T *yp = y + t * P;                                                                     \
      _Pragma("omp simd")                                                                    \
      for (int64_t e = 0; e < P; ++e) yp[e] = (T)(((double)xp[e] - s0) * a0 + b0);          \
    }                                                                                        \
  }                                                                                          \
  static void bn_backward_##SUF(int64_t N, int64_t C, int64_t P, const T *x, const T *dy,    \
                                const T *mean, const T *invstd, const T *gamma, T *dx,       \
                                T *dgamma, T *dbeta) {                                       \
    const double M = (double)(N * P);                                                        \
    _Pragma("omp parallel for if (N * C * P >= CT_CPU_PAR_MIN) schedule(static)")            \
    for (int64_t c = 0; c < C; ++c) {                                                        \
      const double mu = mean[c], is = invstd[c];                                             \
      double sg = 0, sgx = 0; /* sum dy, sum dy * (x - mean) */                              \
      for (int64_t n = 0; n < N; ++n) {                                                      \
        const T *xp = x + (n * C + c) * P, *gp = dy + (n * C + c) * P;                        \
        double a = 0, b = 0;                                                                 \
        _Pragma("omp simd reduction(+ : a, b)")                                              \
        for (int64_t e = 0; e < P; ++e) {                                                    \
          a += (double)gp[e];                                                                \
          b += (double)gp[e] * ((double)xp[e] - mu);                                         \
        }                                                                                    \
        sg += a;                                                                             \
        sgx += b;                                                                            \
      }                                                                                      \
      const double dg = sgx * is; /* sum dy * xhat */                                        \
      dbeta[c] = (T)sg;                                                                      \
      dgamma[c] = (T)dg;                                                                     \
      const double k = (double)gamma[c] * is, mg = sg / M, mx = dg / M * is;                 \
      for (int64_t n = 0; n < N; ++n) {                                                      \
        const T *xp = x + (n * C + c) * P, *gp = dy + (n * C + c) * P;                        \
        T *op = dx + (n * C + c) * P;                                                        \
        _Pragma("omp simd")                                                                  \
        for (int64_t e = 0; e < P; ++e)                                                      \
          op[e] = (T)(k * ((double)gp[e] - mg - ((double)xp[e] - mu) * mx));                 \
      }                                                                                      \
    }                                                                                        \
  }
BN(f32, float)
BN(f64, double)

static int bn_stats(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, double eps,
                    void *mean, void *invstd, void *running_mean, void *running_var,
                    double momentum, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32:
    bn_stats_f32(n, c, p, x, eps, mean, invstd, running_mean, running_var, momentum);
    return CT_OK;
  case CT_F64:
    bn_stats_f64(n, c, p, x, eps, mean, invstd, running_mean, running_var, momentum);
    return CT_OK;
  default: return unsupported("BatchNorm2d", dt);
  }
}

// Per-channel (shift, a, b) in double from dt values: y = (x - shift) * a + b.
static int bn_affine(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                     const void *shift, const void *scale, bool scale_is_var, double eps,
                     const void *gamma, const void *beta, void *y) {
  if (dt != CT_F32 && dt != CT_F64) return unsupported("BatchNorm2d", dt);
  double stack[3 * 256];
  double *buf = c <= 256 ? stack : malloc((size_t)(3 * c) * sizeof(double));
  if (!buf) return ct_fail(CT_ERR_OOM, "BatchNorm2d: out of host memory for %lld channels",
                           (long long)c);
  double *sh = buf, *a = buf + c, *b = buf + 2 * c;
  for (int64_t i = 0; i < c; ++i) {
    const double s = ct_load_f64((const char *)shift + i * ct_dtype_size(dt), dt);
    const double v = ct_load_f64((const char *)scale + i * ct_dtype_size(dt), dt);
    const double gm = ct_load_f64((const char *)gamma + i * ct_dtype_size(dt), dt);
    sh[i] = s;
    a[i] = (scale_is_var ? 1.0 / sqrt(v + eps) : v) * gm;
    b[i] = ct_load_f64((const char *)beta + i * ct_dtype_size(dt), dt);
  }
  if (dt == CT_F32) bn_affine_f32(n, c, p, x, sh, a, b, y);
  else bn_affine_f64(n, c, p, x, sh, a, b, y);
  if (buf != stack) free(buf);
  return CT_OK;
}

static int bn_apply(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                    const void *mean, const void *invstd, const void *gamma, const void *beta,
                    void *y, ct_stream *s) {
  (void)s;
  return bn_affine(dt, n, c, p, x, mean, invstd, false, 0.0, gamma, beta, y);
}

static int bn_eval(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                   const void *running_mean, const void *running_var, double eps,
                   const void *gamma, const void *beta, void *y, ct_stream *s) {
  (void)s;
  return bn_affine(dt, n, c, p, x, running_mean, running_var, true, eps, gamma, beta, y);
}

static int bn_backward(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                       const void *dy, const void *mean, const void *invstd, const void *gamma,
                       void *dx, void *dgamma, void *dbeta, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32:
    bn_backward_f32(n, c, p, x, dy, mean, invstd, gamma, dx, dgamma, dbeta);
    return CT_OK;
  case CT_F64:
    bn_backward_f64(n, c, p, x, dy, mean, invstd, gamma, dx, dgamma, dbeta);
    return CT_OK;
  default: return unsupported("BatchNorm2d", dt);
  }
}

// The family's list names every entry; each is the function of its name above.
#define CTI_OP_CPU_PREFIX
const cti_conv_kernels cti_cpu_conv_kernels = {CTI_CONV_OPS(CTI_OP_CPU_INIT)};
