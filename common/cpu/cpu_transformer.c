// SPDX-License-Identifier: MIT
//
// cpu_transformer: the transformer family's loops on the host (see
// transformer_kernels.h for what each computes).
//
// Like the rest of the CPU backend, no result depends on the number of
// OpenMP threads: loops split by row, by element or by column block, and
// every sum runs in one fixed order on one thread. Row statistics and column
// sums accumulate in double and are rounded to the dtype once; the embedding
// gradient sums in the compute type in ascending index order, exactly as
// the CUDA kernel does, so the two give the same bits. Below CT_CPU_PAR_MIN
// elements a loop stays on the calling thread.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_kernels.h"
#include "error.h"
#include "transformer_kernels.h"

static int unsupported(const char *op, ct_dtype dt) {
  return ct_fail(CT_ERR_DTYPE, "%s: not implemented for %s on cpu", op,
                 ct_dtype_valid(dt) ? ct_dtype_name(dt) : "an invalid dtype");
}

// Store a compute-type value into a dtype's storage, rounded once.
#define ST_OUT_f32(v) ((float)(v))
#define ST_OUT_f64(v) ((double)(v))
#define ST_OUT_f16(v) cti_cpu_f32_to_f16((float)(v))
#define ST_OUT_bf16(v) cti_cpu_f32_to_bf16((float)(v))

// Expands X(SUF, DT) for the four floating dtypes; a switch picks one.
#define FLOAT_CASES(X) X(f32, CT_F32) X(f64, CT_F64) X(f16, CT_F16) X(bf16, CT_BF16)
#define WIDE_CASES(X) X(f32, CT_F32) X(f64, CT_F64)

// ---- embedding ------------------------------------------------------------------------------
// out[i] = weight[idx[i]]: a copy of bits, row by row.
static int embedding(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                     const void *weight, void *out, int64_t *bad, ct_stream *s) {
  (void)s;
  *bad = -1;
  const size_t es = cti_cpu_elsize(dt);
  if (!cti_cpu_is_float(dt)) return unsupported("Embedding", dt);
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= v) {
      *bad = i;
      return CT_OK;
    }
  const char *w = weight;
  char *o = out;
#pragma omp parallel for if (n * c >= CT_CPU_PAR_MIN) schedule(static)
  for (int64_t i = 0; i < n; ++i) memcpy(o + (size_t)(i * c) * es, w + (size_t)(idx[i] * c) * es, (size_t)c * es);
  return CT_OK;
}

// dweight[r][j] = sum over i ascending with idx[i] == r of dout[i][j], in the
// compute type. A stable counting sort of the indices first lists, for each
// row r, the positions i holding r in ascending order (pos[start[r] ..
// start[r+1])), so each row is then owned by one thread and summed in the
// order the CUDA kernel uses, at a cost of n + v + n*c instead of v*n.
#define EMB_BWD(SUF, DT)                                                                       \
  static void emb_bwd_##SUF(int64_t c, int64_t v, const int64_t *start, const int64_t *pos,   \
                            const ST_##SUF *dout, ST_##SUF *dw) {                             \
    _Pragma("omp parallel for if (v * c >= CT_CPU_PAR_MIN) schedule(dynamic, 16)")            \
    for (int64_t r = 0; r < v; ++r) {                                                         \
      for (int64_t j0 = 0; j0 < c; j0 += 64) {                                                \
        const int64_t w = c - j0 < 64 ? c - j0 : 64;                                          \
        CT_##SUF acc[64];                                                                     \
        for (int64_t j = 0; j < w; ++j) acc[j] = 0;                                           \
        for (int64_t k = start[r]; k < start[r + 1]; ++k) {                                   \
          const ST_##SUF *g = dout + pos[k] * c + j0;                                         \
          for (int64_t j = 0; j < w; ++j) acc[j] = acc[j] + LD_##SUF(g[j]);                   \
        }                                                                                     \
        for (int64_t j = 0; j < w; ++j) dw[r * c + j0 + j] = ST_OUT_##SUF(acc[j]);            \
      }                                                                                       \
    }                                                                                         \
  }
FLOAT_CASES(EMB_BWD)

static int embedding_backward(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                              const void *dout, void *dweight, ct_stream *s) {
  (void)s;
  if (!cti_cpu_is_float(dt)) return unsupported("Embedding backward", dt);
  int64_t *start = calloc((size_t)v + 1, sizeof *start), *pos = malloc((size_t)(n > 0 ? n : 1) * sizeof *pos);
  if (!start || !pos) {
    free(start), free(pos);
    return ct_fail(CT_ERR_OOM, "Embedding backward: out of host memory for %lld indices", (long long)n);
  }
  for (int64_t i = 0; i < n; ++i) ++start[idx[i] + 1]; // the forward checked idx[i] in [0, v)
  for (int64_t r = 0; r < v; ++r) start[r + 1] += start[r];
  for (int64_t i = 0; i < n; ++i) pos[start[idx[i]]++] = i; // start[r] becomes row r's end
  for (int64_t r = v; r > 0; --r) start[r] = start[r - 1];  // shift back: start[r] is its beginning
  start[0] = 0;
  switch (dt) {
#define CASE(SUF, DT) case DT: emb_bwd_##SUF(c, v, start, pos, dout, dweight); break;
    FLOAT_CASES(CASE)
#undef CASE
  default: break;
  }
  free(start), free(pos);
  return CT_OK;
}

// ---- layer norm -------------------------------------------------------------------------------
#define LN_FWD(SUF, DT)                                                                        \
  static void ln_fwd_##SUF(int64_t n, int64_t c, const ST_##SUF *x, const ST_##SUF *w,        \
                           const ST_##SUF *b, double eps, ST_##SUF *y, ST_##SUF *mean,        \
                           ST_##SUF *rstd) {                                                  \
    _Pragma("omp parallel for if (n * c >= CT_CPU_PAR_MIN) schedule(static)")                 \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const ST_##SUF *xi = x + i * c;                                                         \
      double s = 0, ss = 0;                                                                   \
      for (int64_t j = 0; j < c; ++j) s += (double)LD_##SUF(xi[j]);                           \
      const double mu = s / (double)c;                                                        \
      for (int64_t j = 0; j < c; ++j) {                                                       \
        const double d = (double)LD_##SUF(xi[j]) - mu;                                        \
        ss += d * d;                                                                          \
      }                                                                                       \
      const double r = 1.0 / sqrt(ss / (double)c + eps);                                      \
      for (int64_t j = 0; j < c; ++j)                                                         \
        y[i * c + j] = ST_OUT_##SUF(((double)LD_##SUF(xi[j]) - mu) * r * (double)LD_##SUF(w[j]) \
                                    + (double)LD_##SUF(b[j]));                                \
      mean[i] = ST_OUT_##SUF(mu);                                                             \
      rstd[i] = ST_OUT_##SUF(r);                                                              \
    }                                                                                         \
  }
WIDE_CASES(LN_FWD)

static int layernorm(ct_dtype dt, int64_t n, int64_t c, const void *x, const void *w, const void *b,
                     double eps, void *y, void *mean, void *rstd, ct_stream *s) {
  (void)s;
  switch (dt) {
#define CASE(SUF, DT) case DT: ln_fwd_##SUF(n, c, x, w, b, eps, y, mean, rstd); return CT_OK;
    WIDE_CASES(CASE)
#undef CASE
  default: return unsupported("LayerNorm", dt);
  }
}

// dx row by row (the saved mean and rstd, as stored, define xhat); dw and db
// column by column, a block of 64 columns per task, rows in order.
#define LN_BWD(SUF, DT)                                                                        \
  static void ln_bwd_##SUF(int64_t n, int64_t c, const ST_##SUF *x, const ST_##SUF *dy,       \
                           const ST_##SUF *mean, const ST_##SUF *rstd, const ST_##SUF *w,     \
                           ST_##SUF *dx, ST_##SUF *dw, ST_##SUF *db) {                        \
    _Pragma("omp parallel for if (n * c >= CT_CPU_PAR_MIN) schedule(static)")                 \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const ST_##SUF *xi = x + i * c, *gi = dy + i * c;                                       \
      const double mu = (double)LD_##SUF(mean[i]), r = (double)LD_##SUF(rstd[i]);            \
      double sg = 0, sgx = 0;                                                                 \
      for (int64_t j = 0; j < c; ++j) {                                                       \
        const double g = (double)LD_##SUF(gi[j]) * (double)LD_##SUF(w[j]);                    \
        sg += g;                                                                              \
        sgx += g * (((double)LD_##SUF(xi[j]) - mu) * r);                                      \
      }                                                                                       \
      sg /= (double)c, sgx /= (double)c;                                                      \
      for (int64_t j = 0; j < c; ++j) {                                                       \
        const double g = (double)LD_##SUF(gi[j]) * (double)LD_##SUF(w[j]);                    \
        const double xh = ((double)LD_##SUF(xi[j]) - mu) * r;                                 \
        dx[i * c + j] = ST_OUT_##SUF(r * (g - sg - xh * sgx));                                \
      }                                                                                       \
    }                                                                                         \
    const int64_t blocks = (c + 63) / 64;                                                     \
    _Pragma("omp parallel for if (n * c >= CT_CPU_PAR_MIN) schedule(static)")                 \
    for (int64_t bk = 0; bk < blocks; ++bk) {                                                 \
      const int64_t j0 = bk * 64, wd = c - j0 < 64 ? c - j0 : 64;                             \
      double aw[64] = {0}, ab[64] = {0};                                                      \
      for (int64_t i = 0; i < n; ++i) {                                                       \
        const double mu = (double)LD_##SUF(mean[i]), r = (double)LD_##SUF(rstd[i]);          \
        for (int64_t j = 0; j < wd; ++j) {                                                    \
          const double g = (double)LD_##SUF(dy[i * c + j0 + j]);                              \
          aw[j] += g * (((double)LD_##SUF(x[i * c + j0 + j]) - mu) * r);                      \
          ab[j] += g;                                                                         \
        }                                                                                     \
      }                                                                                       \
      for (int64_t j = 0; j < wd; ++j) {                                                      \
        dw[j0 + j] = ST_OUT_##SUF(aw[j]);                                                     \
        db[j0 + j] = ST_OUT_##SUF(ab[j]);                                                     \
      }                                                                                       \
    }                                                                                         \
  }
WIDE_CASES(LN_BWD)

static int layernorm_backward(ct_dtype dt, int64_t n, int64_t c, const void *x, const void *dy,
                              const void *mean, const void *rstd, const void *w, void *dx, void *dw,
                              void *db, void *work, ct_stream *s) {
  (void)s, (void)work;
  switch (dt) {
#define CASE(SUF, DT) case DT: ln_bwd_##SUF(n, c, x, dy, mean, rstd, w, dx, dw, db); return CT_OK;
    WIDE_CASES(CASE)
#undef CASE
  default: return unsupported("LayerNorm backward", dt);
  }
}

// ---- GELU -----------------------------------------------------------------------------------
// float64, and approximate="none" in every dtype: in double, rounded once to
// the dtype. K = sqrt(2/pi), A = 0.044715.
static const double GELU_K = 0.7978845608028654, GELU_A = 0.044715;
static const double INV_SQRT2 = 0.7071067811865476, INV_SQRT_2PI = 0.3989422804014327;

static inline double gelu_value(bool tanh_approx, double x) {
  if (tanh_approx) return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x)));
  return 0.5 * x * (1.0 + erf(x * INV_SQRT2));
}
static inline double gelu_slope(bool tanh_approx, double x) {
  if (tanh_approx) {
    const double t = tanh(GELU_K * (x + GELU_A * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
  }
  return 0.5 * (1.0 + erf(x * INV_SQRT2)) + x * exp(-0.5 * x * x) * INV_SQRT_2PI;
}

#define GELU(SUF, DT)                                                                          \
  static void gelu_##SUF(bool ta, int64_t n, const ST_##SUF *x, const ST_##SUF *dy,           \
                         ST_##SUF *out) {                                                     \
    _Pragma("omp parallel for if (n >= CT_CPU_PAR_MIN / 8) schedule(static)")                 \
    for (int64_t i = 0; i < n; ++i) {                                                         \
      const double xi = (double)LD_##SUF(x[i]);                                               \
      out[i] = ST_OUT_##SUF(dy ? (double)LD_##SUF(dy[i]) * gelu_slope(ta, xi)                 \
                               : gelu_value(ta, xi));                                         \
    }                                                                                         \
  }
FLOAT_CASES(GELU)

// approximate="tanh" in f32, f16 and bf16: in float with the formula the
// CUDA functor uses (transformer_kernels.h), a loop per direction that GCC
// vectorizes; out = gelu(x), or dy * gelu'(x) rounded in float, then to the
// dtype. Each thread runs one simd loop over its share, compiled twice
// (target_clones): for AVX2 (8 floats a step) and for baseline x86-64 (4),
// the loader picking the one the CPU runs, as ct_jit's CPU kernels do.
// AVX2 without FMA: each product and sum rounds on its own, so both clones
// give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define CPU_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CPU_SIMD_CLONES
#endif
#define GELU_TANH_F(SUF, DT)                                                                   \
  CPU_SIMD_CLONES static void gelu_tanh_span_##SUF(int64_t lo, int64_t hi, const ST_##SUF *x, \
                                                   const ST_##SUF *dy, ST_##SUF *out) {       \
    if (!dy) {                                                                                \
      _Pragma("omp simd")                                                                     \
      for (int64_t i = lo; i < hi; ++i) out[i] = ST_OUT_##SUF(cti_gelu_tanh_valuef(LD_##SUF(x[i]))); \
    } else {                                                                                  \
      _Pragma("omp simd")                                                                     \
      for (int64_t i = lo; i < hi; ++i)                                                       \
        out[i] = ST_OUT_##SUF(LD_##SUF(dy[i]) * cti_gelu_tanh_slopef(LD_##SUF(x[i])));        \
    }                                                                                         \
  }                                                                                           \
  static void gelu_tanh_##SUF(int64_t n, const ST_##SUF *x, const ST_##SUF *dy,               \
                              ST_##SUF *out) {                                                \
    _Pragma("omp parallel if (n >= CT_CPU_PAR_MIN / 8)")                                      \
    {                                                                                         \
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();                     \
      const int64_t chunk = (n + nt - 1) / nt, lo = t * chunk;                                \
      if (lo < n) gelu_tanh_span_##SUF(lo, n - lo < chunk ? n : lo + chunk, x, dy, out);      \
    }                                                                                         \
  }
GELU_TANH_F(f32, CT_F32)
GELU_TANH_F(f16, CT_F16)
GELU_TANH_F(bf16, CT_BF16)

static int gelu(ct_dtype dt, bool tanh_approx, int64_t n, const void *x, const void *dy, void *out,
                ct_stream *s) {
  (void)s;
  if (tanh_approx && dt != CT_F64) {
    switch (dt) {
#define CASE(SUF, DT) case DT: gelu_tanh_##SUF(n, x, dy, out); return CT_OK;
      CASE(f32, CT_F32) CASE(f16, CT_F16) CASE(bf16, CT_BF16)
#undef CASE
    default: break;
    }
  }
  switch (dt) {
#define CASE(SUF, DT) case DT: gelu_##SUF(tanh_approx, n, x, dy, out); return CT_OK;
    FLOAT_CASES(CASE)
#undef CASE
  default: return unsupported("GELU", dt);
  }
}

// ---- softmax --------------------------------------------------------------------------------
// Row r: the first `len` entries take part (len = t + 1 under the causal
// mask, else cols); the rest get 0. Each exp is computed once: rows up to
// SOFTMAX_KEEP long keep theirs (in double, so the same bits) on the stack
// between the sum and the division; a longer row computes them twice.
#define SOFTMAX_KEEP 1024
#define SOFTMAX(SUF, DT)                                                                       \
  static void softmax_##SUF(int64_t rows, int64_t cols, bool causal, double scale,            \
                            const ST_##SUF *x, ST_##SUF *y) {                                 \
    _Pragma("omp parallel for if (rows * cols >= CT_CPU_PAR_MIN) schedule(static)")           \
    for (int64_t r = 0; r < rows; ++r) {                                                      \
      const ST_##SUF *xr = x + r * cols;                                                      \
      ST_##SUF *yr = y + r * cols;                                                            \
      const int64_t len = causal ? r % cols + 1 : cols;                                       \
      double m = -INFINITY, e[SOFTMAX_KEEP];                                                  \
      for (int64_t j = 0; j < len; ++j) {                                                     \
        const double z = scale * (double)LD_##SUF(xr[j]);                                     \
        if (z > m || z != z) m = z;                                                           \
      }                                                                                       \
      const double shift = isfinite(m) ? m : 0.0;                                             \
      const bool keep = len <= SOFTMAX_KEEP;                                                  \
      double s = 0;                                                                           \
      for (int64_t j = 0; j < len; ++j) {                                                     \
        const double ej = exp(scale * (double)LD_##SUF(xr[j]) - shift);                       \
        if (keep) e[j] = ej;                                                                  \
        s += ej;                                                                              \
      }                                                                                       \
      for (int64_t j = 0; j < len; ++j)                                                       \
        yr[j] = ST_OUT_##SUF((keep ? e[j] : exp(scale * (double)LD_##SUF(xr[j]) - shift)) / s); \
      for (int64_t j = len; j < cols; ++j) yr[j] = ST_OUT_##SUF(0.0);                         \
    }                                                                                         \
  }
WIDE_CASES(SOFTMAX)

static int softmax(ct_dtype dt, int64_t rows, int64_t cols, bool causal, double scale, const void *x,
                   void *y, ct_stream *s) {
  (void)s;
  switch (dt) {
#define CASE(SUF, DT) case DT: softmax_##SUF(rows, cols, causal, scale, x, y); return CT_OK;
    WIDE_CASES(CASE)
#undef CASE
  default: return unsupported("softmax", dt);
  }
}

#define SOFTMAX_BWD(SUF, DT)                                                                   \
  static void softmax_bwd_##SUF(int64_t rows, int64_t cols, double scale, const ST_##SUF *y,  \
                                const ST_##SUF *dy, ST_##SUF *dx) {                           \
    _Pragma("omp parallel for if (rows * cols >= CT_CPU_PAR_MIN) schedule(static)")           \
    for (int64_t r = 0; r < rows; ++r) {                                                      \
      const ST_##SUF *yr = y + r * cols, *gr = dy + r * cols;                                 \
      double s = 0;                                                                           \
      for (int64_t j = 0; j < cols; ++j) s += (double)LD_##SUF(yr[j]) * (double)LD_##SUF(gr[j]); \
      for (int64_t j = 0; j < cols; ++j)                                                      \
        dx[r * cols + j] =                                                                    \
            ST_OUT_##SUF(scale * (double)LD_##SUF(yr[j]) * ((double)LD_##SUF(gr[j]) - s));    \
    }                                                                                         \
  }
WIDE_CASES(SOFTMAX_BWD)

static int softmax_backward(ct_dtype dt, int64_t rows, int64_t cols, double scale, const void *y,
                            const void *dy, void *dx, ct_stream *s) {
  (void)s;
  switch (dt) {
#define CASE(SUF, DT) case DT: softmax_bwd_##SUF(rows, cols, scale, y, dy, dx); return CT_OK;
    WIDE_CASES(CASE)
#undef CASE
  default: return unsupported("softmax backward", dt);
  }
}

// ---- cross-entropy ------------------------------------------------------------------------------
// As cpu_nn.c's rows (max shift, log-softmax without cancellation), with
// ignored rows and the mean over the counted ones.
#define LM_CE(SUF, DT)                                                                          \
  static void lm_ce_##SUF(int64_t n, int64_t v, const ST_##SUF *x, const int64_t *target,      \
                          int64_t ignore, ST_##SUF *loss, ST_##SUF *g, double inv) {           \
    _Pragma("omp parallel for if (n * v >= CT_CPU_PAR_MIN) schedule(static)")                  \
    for (int64_t i = 0; i < n; ++i) {                                                          \
      const ST_##SUF *xi = x + i * v;                                                          \
      ST_##SUF *gi = g ? g + i * v : NULL;                                                     \
      const int64_t t = target[i];                                                             \
      if (t == ignore) {                                                                       \
        loss[i] = 0;                                                                           \
        if (gi) for (int64_t j = 0; j < v; ++j) gi[j] = 0;                                     \
        continue;                                                                              \
      }                                                                                        \
      double m = -INFINITY;                                                                    \
      for (int64_t j = 0; j < v; ++j)                                                          \
        if ((double)xi[j] > m || xi[j] != xi[j]) m = xi[j];                                    \
      const double shift = isfinite(m) ? m : 0.0;                                              \
      double s = 0;                                                                            \
      for (int64_t j = 0; j < v; ++j) s += exp((double)xi[j] - shift);                         \
      const double ls = log(s);                                                                \
      loss[i] = (ST_##SUF)(ls - ((double)xi[t] - shift));                                      \
      if (gi)                                                                                  \
        for (int64_t j = 0; j < v; ++j)                                                        \
          gi[j] = (ST_##SUF)((exp(((double)xi[j] - shift) - ls) - (j == t ? 1.0 : 0.0)) * inv); \
    }                                                                                          \
  }
WIDE_CASES(LM_CE)

static int cross_entropy(ct_dtype dt, int64_t n, int64_t v, const void *logits, const int64_t *target,
                         int64_t ignore_index, void *loss_rows, void *grad, void *scale, int64_t *bad,
                         ct_stream *s) {
  (void)s;
  *bad = -1;
  if (dt != CT_F32 && dt != CT_F64) return unsupported("ct_cross_entropy", dt);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore_index) continue;
    if (target[i] < 0 || target[i] >= v) {
      *bad = i;
      return CT_OK;
    }
    ++count;
  }
  const double inv = 1.0 / (double)count; // inf for 0: the mean is then NaN, as torch's
  if (dt == CT_F32) {
    *(float *)scale = (float)inv;
    lm_ce_f32(n, v, logits, target, ignore_index, loss_rows, grad, inv);
  } else {
    *(double *)scale = inv;
    lm_ce_f64(n, v, logits, target, ignore_index, loss_rows, grad, inv);
  }
  return CT_OK;
}

// The family's list names every entry; each is the function of its name above.
#define CTI_OP_CPU_PREFIX
const cti_transformer_kernels cti_cpu_transformer_kernels = {CTI_TRANSFORMER_OPS(CTI_OP_CPU_INIT)};
