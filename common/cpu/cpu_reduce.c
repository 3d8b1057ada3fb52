// SPDX-License-Identifier: MIT
//
// cpu_reduce: sum, mean, max and argmax over the middle dim of a contiguous
// (outer, r, inner) input, on the host; and the "any non-finite?" scan.
//
// Invariant: the result does not depend on the number of threads. The work
// is cut into units of (one outer index, a block of at most RB_SIZE steps of
// r, a block of at most IB_SIZE inner columns); the cut depends only on the
// shape. A unit's partial result is computed by one thread; when r spans
// several blocks the partials are combined afterwards in block order. So a
// float sum is the same bits on 1 thread or 16.
//
// Accuracy: floating inputs accumulate in double (PyTorch's CPU sum
// accumulates float in double too), integers and bools in int64 with
// wrap-around; the result is then rounded once to out_dt. Inner-most loops
// run across the inner columns (contiguous) or, when inner == 1, along r
// with an `omp simd` reduction, so both layouts vectorize.
//
// Max/argmax follow torch.max: the first maximum wins ties, and a NaN beats
// every number (the first NaN wins). Values are copied from the input, so a
// float16 maximum is the input's bits, not a round trip through float.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "dtype.h"
#include "error.h"

#define RB_SIZE 4096 // steps of r per unit
#define IB_SIZE 256  // inner columns per unit


// (ST_, CT_, LD_, ISNAN_ per dtype suffix come from cpu_kernels.h.)
// Accumulator: double for floats, uint64 (wrapping int64) for the rest.
#define AT_b8 uint64_t
#define AT_u8 uint64_t
#define AT_i32 uint64_t
#define AT_i64 uint64_t
#define AT_f16 double
#define AT_bf16 double
#define AT_f32 double
#define AT_f64 double

#define FOR_ALL(GEN)                                                           \
  GEN(b8) GEN(u8) GEN(i32) GEN(i64) GEN(f16) GEN(bf16) GEN(f32) GEN(f64)
#define TABLE(P)                                                               \
  { P##b8, P##u8, P##i32, P##i64, P##f16, P##bf16, P##f32, P##f64 }

// One unit's partial result: columns [i0, i0 + w) of outer index o, r steps
// [j0, j1).
typedef struct unit {
  int64_t o, j0, j1, i0, w;
} unit;

// Partial sums as doubles (float inputs) or uint64 (the rest).
typedef union acc_buf {
  double d[IB_SIZE];
  uint64_t u[IB_SIZE];
} acc_buf;

// acc[0:w] := sum over j in [j0, j1) of in[o, j, i0:i0+w].
#define SUM_KERNEL(S)                                                          \
  static void sum_##S(const void *in_, int64_t r, int64_t inner, const unit *u, \
                      void *acc_) {                                            \
    const ST_##S *in = (const ST_##S *)in_ + u->o * r * inner + u->i0;         \
    AT_##S *acc = (AT_##S *)acc_;                                              \
    if (inner == 1) { /* 8 running sums: independent add chains, SIMD */    \
      AT_##S p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0, p5 = 0, p6 = 0, p7 = 0;  \
      int64_t j = u->j0;                                                       \
      for (; j + 8 <= u->j1; j += 8) {                                         \
        p0 += (AT_##S)LD_##S(in[j]);                                           \
        p1 += (AT_##S)LD_##S(in[j + 1]);                                       \
        p2 += (AT_##S)LD_##S(in[j + 2]);                                       \
        p3 += (AT_##S)LD_##S(in[j + 3]);                                       \
        p4 += (AT_##S)LD_##S(in[j + 4]);                                       \
        p5 += (AT_##S)LD_##S(in[j + 5]);                                       \
        p6 += (AT_##S)LD_##S(in[j + 6]);                                       \
        p7 += (AT_##S)LD_##S(in[j + 7]);                                       \
      }                                                                        \
      for (; j < u->j1; ++j) p0 += (AT_##S)LD_##S(in[j]);                      \
      acc[0] = ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7));              \
      return;                                                                  \
    }                                                                          \
    for (int64_t i = 0; i < u->w; ++i) acc[i] = 0;                             \
    for (int64_t j = u->j0; j < u->j1; ++j) {                                  \
      const ST_##S *row = in + j * inner;                                      \
      _Pragma("omp simd")                                                      \
      for (int64_t i = 0; i < u->w; ++i) acc[i] += (AT_##S)LD_##S(row[i]);     \
    }                                                                          \
  }
FOR_ALL(SUM_KERNEL)
typedef void (*sum_fn)(const void *, int64_t, int64_t, const unit *, void *);
static const sum_fn k_sum[CT_NUM_DTYPES] = TABLE(sum_);

// bi[0:w] := index j in [j0, j1) of the maximum of in[o, j, i0 + i].
#define MAX_KERNEL(S)                                                          \
  static void max_##S(const void *in_, int64_t r, int64_t inner, const unit *u, \
                      int64_t *bi) {                                           \
    const ST_##S *in = (const ST_##S *)in_ + u->o * r * inner + u->i0;         \
    if (inner == 1) {                                                          \
      CT_##S best = LD_##S(in[u->j0]);                                         \
      int64_t b = u->j0;                                                       \
      if (!ISNAN_##S(best)) {                                                  \
        for (int64_t j = u->j0 + 1; j < u->j1; ++j) {                          \
          const CT_##S v = LD_##S(in[j]);                                      \
          if (ISNAN_##S(v)) {                                                  \
            b = j;                                                             \
            break;                                                             \
          }                                                                    \
          if (v > best) {                                                      \
            best = v;                                                          \
            b = j;                                                             \
          }                                                                    \
        }                                                                      \
      }                                                                        \
      bi[0] = b;                                                               \
      return;                                                                  \
    }                                                                          \
    CT_##S best[IB_SIZE];                                                      \
    for (int64_t i = 0; i < u->w; ++i) {                                       \
      best[i] = LD_##S(in[u->j0 * inner + i]);                                 \
      bi[i] = u->j0;                                                           \
    }                                                                          \
    for (int64_t j = u->j0 + 1; j < u->j1; ++j) {                              \
      const ST_##S *row = in + j * inner;                                      \
      _Pragma("omp simd")                                                      \
      for (int64_t i = 0; i < u->w; ++i) {                                     \
        const CT_##S v = LD_##S(row[i]), bv = best[i];                         \
        const int64_t bj = bi[i];                                              \
        const bool take = !ISNAN_##S(bv) && (ISNAN_##S(v) || v > bv);          \
        best[i] = take ? v : bv;                                               \
        bi[i] = take ? j : bj;                                                 \
      }                                                                        \
    }                                                                          \
  }
FOR_ALL(MAX_KERNEL)
typedef void (*max_fn)(const void *, int64_t, int64_t, const unit *, int64_t *);
static const max_fn k_max[CT_NUM_DTYPES] = TABLE(max_);

// Whether element c (a later block's winner) beats element b along r, at
// column `at` = o * r * inner + i.
#define BEATS(S)                                                               \
  static bool beats_##S(const void *in_, int64_t inner, int64_t at, int64_t b,  \
                        int64_t c) {                                           \
    const ST_##S *in = (const ST_##S *)in_ + at;                               \
    const CT_##S vb = LD_##S(in[b * inner]), vc = LD_##S(in[c * inner]);       \
    return !ISNAN_##S(vb) && (ISNAN_##S(vc) || vc > vb);                       \
  }
FOR_ALL(BEATS)
typedef bool (*beats_fn)(const void *, int64_t, int64_t, int64_t, int64_t);
static const beats_fn k_beats[CT_NUM_DTYPES] = TABLE(beats_);

// Stores a float result (sum, mean) as dt: float types round, integer
// types truncate and saturate (NaN -> 0).
static void store_double(void *out, ct_dtype dt, int64_t i, double v) {
  switch (dt) {
  case CT_F64: ((double *)out)[i] = v; break;
  case CT_F32: ((float *)out)[i] = (float)v; break;
  case CT_F16: ((uint16_t *)out)[i] = cti_cpu_f32_to_f16((float)v); break;
  case CT_BF16: ((uint16_t *)out)[i] = cti_cpu_f32_to_bf16((float)v); break;
  case CT_BOOL: ((uint8_t *)out)[i] = v != 0; break;
  default: {
    const int64_t x = v != v                        ? 0
                      : v >= 9223372036854775808.0  ? INT64_MAX
                      : v < -9223372036854775808.0 ? INT64_MIN
                                                    : (int64_t)v;
    if (dt == CT_I64)
      ((int64_t *)out)[i] = x;
    else if (dt == CT_I32)
      ((int32_t *)out)[i] = x > INT32_MAX ? INT32_MAX : x < INT32_MIN ? INT32_MIN : (int32_t)x;
    else
      ((uint8_t *)out)[i] = x > 255 ? 255 : x < 0 ? 0 : (uint8_t)x;
  }
  }
}

// Stores an integer sum as dt (integer types wrap, as PyTorch's casts do).
static void store_int(void *out, ct_dtype dt, int64_t i, int64_t v) {
  switch (dt) {
  case CT_I64: ((int64_t *)out)[i] = v; break;
  case CT_I32: ((int32_t *)out)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
  case CT_U8: ((uint8_t *)out)[i] = (uint8_t)v; break;
  case CT_BOOL: ((uint8_t *)out)[i] = v != 0; break;
  case CT_F64: ((double *)out)[i] = (double)v; break;
  case CT_F32: ((float *)out)[i] = (float)v; break;
  case CT_F16: ((uint16_t *)out)[i] = cti_cpu_f32_to_f16((float)v); break;
  default: ((uint16_t *)out)[i] = cti_cpu_f32_to_bf16((float)v); break;
  }
}

// Writes the finished sum for output element oi.
static void finish_sum(bool mean, bool fl, ct_dtype out_dt, void *out, int64_t oi,
                       const acc_buf *a, int64_t k, int64_t r) {
  if (fl) store_double(out, out_dt, oi, mean ? a->d[k] / (double)r : a->d[k]);
  else if (mean) store_double(out, out_dt, oi, (double)(int64_t)a->u[k] / (double)r);
  else store_int(out, out_dt, oi, (int64_t)a->u[k]);
}

static void unit_of(int64_t uix, int64_t nib, int64_t nrb, int64_t r, int64_t inner,
                    unit *u) {
  u->o = uix / (nib * nrb);
  const int64_t rem = uix % (nib * nrb);
  const int64_t ib = rem / nrb, rb = rem % nrb;
  u->i0 = ib * IB_SIZE;
  u->w = inner - u->i0 < IB_SIZE ? inner - u->i0 : IB_SIZE;
  u->j0 = rb * RB_SIZE;
  u->j1 = r - u->j0 < RB_SIZE ? r : u->j0 + RB_SIZE;
}

static int reduce_sum(bool mean, ct_dtype in_dt, ct_dtype out_dt, const void *in,
                      void *out, int64_t outer, int64_t r, int64_t inner) {
  const bool fl = cti_cpu_is_float(in_dt);
  const int64_t nrb = (r + RB_SIZE - 1) / RB_SIZE, nib = (inner + IB_SIZE - 1) / IB_SIZE;
  const int64_t nunits = outer * nib * nrb;
  const bool par = outer * r * inner >= CT_CPU_PAR_MIN;
  // (outer, nrb, inner) partials when r spans blocks: 8-byte slots holding
  // a double or a uint64, as acc_buf does.
  uint64_t *part = NULL;
  if (nrb > 1) {
    part = malloc((size_t)(outer * nrb * inner) * sizeof(uint64_t));
    if (!part)
      return ct_fail(CT_ERR_OOM, "ct_sum: cannot allocate %lld partial sums on the host",
                     (long long)(outer * nrb * inner));
  }
  const sum_fn fn = k_sum[in_dt];
#pragma omp parallel for if (par) schedule(static)
  for (int64_t uix = 0; uix < nunits; ++uix) {
    unit u;
    unit_of(uix, nib, nrb, r, inner, &u);
    acc_buf acc;
    fn(in, r, inner, &u, &acc);
    if (!part) {
      for (int64_t i = 0; i < u.w; ++i)
        finish_sum(mean, fl, out_dt, out, u.o * inner + u.i0 + i, &acc, i, r);
    } else {
      uint64_t *dst = part + (u.o * nrb + u.j0 / RB_SIZE) * inner + u.i0;
      memcpy(dst, &acc, (size_t)u.w * sizeof(uint64_t)); // the bits, double or uint64
    }
  }
  if (part) {
#pragma omp parallel for if (par) schedule(static)
    for (int64_t oi = 0; oi < outer * inner; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      acc_buf t;
      t.u[0] = 0;
      for (int64_t rb = 0; rb < nrb; ++rb) { // in block order: fixed rounding
        acc_buf p;
        memcpy(&p, part + (o * nrb + rb) * inner + i, sizeof(uint64_t));
        if (fl) t.d[0] = rb ? t.d[0] + p.d[0] : p.d[0];
        else t.u[0] += p.u[0];
      }
      finish_sum(mean, fl, out_dt, out, oi, &t, 0, r);
    }
    free(part);
  }
  return CT_OK;
}

static int reduce_max(ct_reduce_op op, ct_dtype in_dt, const void *in, void *out,
                      int64_t *idx, int64_t outer, int64_t r, int64_t inner) {
  const char *name = op == CT_OP_ARGMAX ? "argmax" : "max";
  const int64_t nout = outer * inner;
  const int64_t nrb = (r + RB_SIZE - 1) / RB_SIZE, nib = (inner + IB_SIZE - 1) / IB_SIZE;
  const int64_t nunits = outer * nib * nrb;
  const bool par = outer * r * inner >= CT_CPU_PAR_MIN;
  int64_t *win = op == CT_OP_ARGMAX ? (int64_t *)out : idx; // winners along r
  int64_t *own = NULL, *part = NULL;
  if (!win) win = own = malloc((size_t)nout * sizeof(int64_t));
  if (nrb > 1) part = malloc((size_t)(outer * nrb * inner) * sizeof(int64_t));
  if (!win || (nrb > 1 && !part)) {
    free(own);
    free(part);
    return ct_fail(CT_ERR_OOM, "ct_%s: cannot allocate %lld indices on the host", name,
                   (long long)(nrb > 1 ? outer * nrb * inner : nout));
  }
  const max_fn fn = k_max[in_dt];
#pragma omp parallel for if (par) schedule(static)
  for (int64_t uix = 0; uix < nunits; ++uix) {
    unit u;
    unit_of(uix, nib, nrb, r, inner, &u);
    int64_t *dst = part ? part + (u.o * nrb + u.j0 / RB_SIZE) * inner + u.i0
                        : win + u.o * inner + u.i0;
    fn(in, r, inner, &u, dst);
  }
  if (part) {
    const beats_fn beats = k_beats[in_dt];
#pragma omp parallel for if (par) schedule(static)
    for (int64_t oi = 0; oi < nout; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      int64_t b = part[o * nrb * inner + i];
      for (int64_t rb = 1; rb < nrb; ++rb) { // earlier blocks win ties
        const int64_t c = part[(o * nrb + rb) * inner + i];
        if (beats(in, inner, o * r * inner + i, b, c)) b = c;
      }
      win[oi] = b;
    }
    free(part);
  }
  if (op == CT_OP_MAX) { // copy the winners' bits
    const size_t es = cti_cpu_elsize(in_dt);
    const char *src = (const char *)in;
    char *dst = (char *)out;
#pragma omp parallel for if (nout >= CT_CPU_PAR_MIN) schedule(static)
    for (int64_t oi = 0; oi < nout; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      memcpy(dst + (size_t)oi * es, src + (size_t)((o * r + win[oi]) * inner + i) * es, es);
    }
  }
  free(own);
  return CT_OK;
}

// Scans blocks of 16 Ki elements; once a block finds a non-finite value the
// remaining blocks are skipped.
#define NONFINITE_BLOCK 16384
int cti_cpu_any_nonfinite(ct_dtype dt, int64_t n, const void *in, bool *out,
                             ct_stream *s) {
  (void)s;
  if ((unsigned)dt >= (unsigned)CT_NUM_DTYPES)
    return ct_fail(CT_ERR_DTYPE, "ct_any_nonfinite: invalid dtype %d", (int)dt);
  *out = false;
  if (!cti_cpu_is_float(dt) || n <= 0) return CT_OK;
  const int64_t nb = (n + NONFINITE_BLOCK - 1) / NONFINITE_BLOCK;
  int found = 0;
#pragma omp parallel for if (n >= CT_CPU_PAR_MIN) schedule(dynamic, 4)
  for (int64_t blk = 0; blk < nb; ++blk) {
    int seen;
#pragma omp atomic read
    seen = found;
    if (seen) continue;
    const int64_t lo = blk * NONFINITE_BLOCK;
    const int64_t hi = lo + NONFINITE_BLOCK < n ? lo + NONFINITE_BLOCK : n;
    int bad = 0;
    if (dt == CT_F32) {
      const float *p = (const float *)in;
#pragma omp simd reduction(| : bad)
      for (int64_t i = lo; i < hi; ++i) bad |= !isfinite(p[i]);
    } else if (dt == CT_F64) {
      const double *p = (const double *)in;
#pragma omp simd reduction(| : bad)
      for (int64_t i = lo; i < hi; ++i) bad |= !isfinite(p[i]);
    } else { // f16: exponent 0x7c00 all ones; bf16: 0x7f80
      const uint16_t *p = (const uint16_t *)in;
      const uint16_t mask = dt == CT_F16 ? 0x7c00 : 0x7f80;
#pragma omp simd reduction(| : bad)
      for (int64_t i = lo; i < hi; ++i) bad |= (p[i] & mask) == mask;
    }
    if (bad) {
#pragma omp atomic write
      found = 1;
    }
  }
  *out = found != 0;
  return CT_OK;
}

// The CPU runs work when issued, so the flag is set before this returns.
int cti_cpu_found_nonfinite(ct_dtype dt, int64_t n, const void *in, float *found, ct_stream *s) {
  bool any = false;
  int rc = cti_cpu_any_nonfinite(dt, n, in, &any, s);
  if (rc == CT_OK && any) *found = 1.0f;
  return rc;
}

int cti_cpu_reduce(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in,
                  void *out, int64_t *idx, int64_t outer, int64_t r, int64_t inner,
                  ct_stream *s) {
  (void)s;
  static const char *const names[] = {"sum", "mean", "max", "argmax"};
  if ((unsigned)op >= (unsigned)CT_NUM_REDUCE_OPS)
    return ct_fail(CT_ERR_VALUE, "ct_reduce: unknown reduction %d", (int)op);
  const char *name = names[op];
  if ((unsigned)in_dt >= (unsigned)CT_NUM_DTYPES || (unsigned)out_dt >= (unsigned)CT_NUM_DTYPES)
    return ct_fail(CT_ERR_DTYPE, "ct_%s: invalid dtype (%d -> %d)", name, (int)in_dt,
                   (int)out_dt);
  if (outer < 0 || r < 1 || inner < 0)
    return ct_fail(CT_ERR_VALUE,
                   "ct_%s: bad reduction geometry outer=%lld r=%lld inner=%lld (need r >= 1)",
                   name, (long long)outer, (long long)r, (long long)inner);
  if (op == CT_OP_MAX && out_dt != in_dt)
    return ct_fail(CT_ERR_DTYPE, "ct_max: result dtype %s differs from input dtype %s",
                   ct_dtype_name(out_dt), ct_dtype_name(in_dt));
  if (op == CT_OP_ARGMAX && out_dt != CT_I64)
    return ct_fail(CT_ERR_DTYPE, "ct_argmax: result dtype must be int64, got %s",
                   ct_dtype_name(out_dt));
  if (outer == 0 || inner == 0) return CT_OK;
  if (op == CT_OP_SUM || op == CT_OP_MEAN)
    return reduce_sum(op == CT_OP_MEAN, in_dt, out_dt, in, out, outer, r, inner);
  return reduce_max(op, in_dt, in, out, idx, outer, r, inner);
}
