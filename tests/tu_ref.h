// SPDX-License-Identifier: MIT
//
// tu_ref: the tests' own float64 references, written without the runtime.
//
// Invariant: nothing here calls a ct_ function that computes numbers (only
// enums and ct_shape are shared), so a reference cannot inherit a bug from the
// code it checks. Rounding to float16/bfloat16 is done directly from the
// double by scaling to the format's quantum and rint() (round to nearest,
// ties to even), a different method from dtype.c's bit manipulation.
#ifndef CT_TU_REF_H
#define CT_TU_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "nn.h"

// Unit roundoff of each dtype's storage (0 for exact integer types).
static inline double ref_eps(ct_dtype dt) {
  switch (dt) {
  case CT_F16: return ldexp(1.0, -11);
  case CT_BF16: return ldexp(1.0, -8);
  case CT_F32: return ldexp(1.0, -24);
  case CT_F64: return ldexp(1.0, -53);
  default: return 0.0;
  }
}

static inline bool ref_is_float(ct_dtype dt) {
  return dt == CT_F16 || dt == CT_BF16 || dt == CT_F32 || dt == CT_F64;
}

// Rounds x to a binary format with `mant` significand bits (implicit bit
// included), smallest normal exponent `emin` (value 2^emin) and largest
// finite value `maxv`; round to nearest, ties to even; overflow to inf.
static inline double ref_round_bin(double x, int mant, int emin, double maxv) {
  if (isnan(x) || isinf(x) || x == 0.0) return x;
  int e;
  frexp(fabs(x), &e); // |x| = f * 2^e, f in [0.5, 1): leading bit is 2^(e-1)
  int lead = e - 1;
  if (lead < emin) lead = emin; // subnormal: the quantum stops shrinking
  double q = ldexp(1.0, lead - (mant - 1));
  double r = rint(x / q) * q; // x / q is exact: q is a power of two
  if (fabs(r) > maxv) return x > 0 ? INFINITY : -INFINITY;
  return r;
}

static inline double ref_round_f16(double x) {
  return ref_round_bin(x, 11, -14, 65504.0);
}
static inline double ref_round_bf16(double x) {
  return ref_round_bin(x, 8, -126, ldexp(255.0, 120)); // 0x7f7f = 1.9921875 * 2^127
}

// What storing v in dtype dt gives, for v in range of dt (the tests keep
// their values there): floats round to nearest even, integers truncate
// toward zero (C's conversion), bool is v != 0.
static inline double ref_cast(double v, ct_dtype dt) {
  switch (dt) {
  case CT_BOOL: return v != 0.0 ? 1.0 : 0.0;
  case CT_U8: return (double)(uint8_t)(int64_t)trunc(v);
  case CT_I32: return (double)(int32_t)(int64_t)trunc(v);
  case CT_I64: return trunc(v);
  case CT_F16: return ref_round_f16(v);
  case CT_BF16: return ref_round_bf16(v);
  case CT_F32: return (double)(float)v;
  case CT_F64: return v;
  default: return NAN;
  }
}

// n fresh random values of dtype dt (already representable in dt, so
// tu_from_f64 stores them exactly): floats uniform in [lo, hi) then rounded;
// integers are floor of uniform in [lo, hi); bool is 0/1 with p = 1/2.
static inline void ref_random(double *x, int64_t n, ct_dtype dt, double lo, double hi) {
  if (dt == CT_BOOL) {
    tu_fill_uniform(x, n, 0.0, 1.0);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0.5 ? 0.0 : 1.0;
    return;
  }
  tu_fill_uniform(x, n, lo, hi);
  for (int64_t i = 0; i < n; ++i) {
    // Through float first so that no value sits between float and f16 halves
    // (storing a double in f16 may round twice; a float rounds once).
    x[i] = ref_is_float(dt) ? ref_cast((double)(float)x[i], dt) : floor(x[i]);
  }
}

// A malloc'd array of n doubles; fails the test when out of memory.
static inline double *ref_alloc(int64_t n) {
  double *p = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!p) fail_msg("out of host memory for %lld doubles", (long long)n);
  return p;
}

// Row-major contiguous strides (elements) of a shape.
static inline void ref_strides(ct_shape s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s.ndim - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s.d[i];
  }
}

// NumPy broadcasting of two shapes into *out; false when they do not match.
static inline bool ref_broadcast(ct_shape a, ct_shape b, ct_shape *out) {
  int n = a.ndim > b.ndim ? a.ndim : b.ndim;
  out->ndim = n;
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim - n + i, ib = b.ndim - n + i;
    int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out->d[i] = da == 1 ? db : da;
  }
  return true;
}

// The row-major index in an operand of shape `in` (broadcast to `out`) of the
// element at row-major index `i` of `out`.
static inline int64_t ref_bcast_index(int64_t i, ct_shape out, ct_shape in) {
  int64_t st[CT_MAX_DIMS];
  ref_strides(in, st);
  int64_t off = 0;
  for (int d = out.ndim - 1; d >= 0; --d) {
    int64_t idx = i % out.d[d];
    i /= out.d[d];
    int din = in.ndim - out.ndim + d;
    if (din >= 0 && in.d[din] != 1) off += idx * st[din];
  }
  return off;
}

// A fresh random tensor of shape s on dev (ref_random's values) and those
// values as doubles in *host (caller frees).
static inline ct_tensor *ref_tensor(ct_shape s, ct_dtype dt, ct_device dev, double lo, double hi,
                                    double **host) {
  int64_t n = ct_shape_numel(s);
  double *x = ref_alloc(n);
  ref_random(x, n, dt, lo, hi);
  ct_tensor *t = tu_from_f64(x, s, dt, dev);
  TU_CHECK(t);
  *host = x;
  return t;
}

static inline void ref_assert_shape(const ct_tensor *t, ct_shape want, const char *what) {
  ct_shape got = ct_shape_of(t);
  char a[128], b[128];
  if (!ct_shape_eq(got, want))
    fail_msg("%s: shape %s, expected %s", what, ct_shape_str(got, a, sizeof a),
             ct_shape_str(want, b, sizeof b));
}

static inline void ref_assert_dtype(const ct_tensor *t, ct_dtype want, const char *what) {
  if (ct_dtype_of(t) != want)
    fail_msg("%s: dtype %s, expected %s", what, ct_dtype_name(ct_dtype_of(t)), ct_dtype_name(want));
}

// torch.promote_types, written from PyTorch's table: bool < uint8 < int32 <
// int64 < floating; float16 with bfloat16 is float32; floats take the wider.
static inline ct_dtype ref_promote(ct_dtype a, ct_dtype b) {
  static const int rank[CT_NUM_DTYPES] = {[CT_BOOL] = 0, [CT_U8] = 1, [CT_I32] = 2, [CT_I64] = 3,
                                          [CT_F16] = 4, [CT_BF16] = 4, [CT_F32] = 5, [CT_F64] = 6};
  if (a == b) return a;
  if (rank[a] == rank[b]) return CT_F32; // f16 with bf16
  return rank[a] > rank[b] ? a : b;
}

// One element of a binary op in float64 (NaN propagates through maximum and
// minimum, as torch.maximum does). Comparisons give 0/1.
static inline double ref_binary_value(ct_binary_op op, double a, double b) {
  switch (op) {
  case CT_OP_ADD: return a + b;
  case CT_OP_SUB: return a - b;
  case CT_OP_MUL: return a * b;
  case CT_OP_DIV: return a / b;
  case CT_OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
  case CT_OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
  case CT_OP_POW: return pow(a, b);
  case CT_OP_EQ: return a == b;
  case CT_OP_NE: return a != b;
  case CT_OP_LT: return a < b;
  case CT_OP_LE: return a <= b;
  case CT_OP_GT: return a > b;
  case CT_OP_GE: return a >= b;
  default: return NAN;
  }
}

static inline double ref_unary_value(ct_unary_op op, double x) {
  switch (op) {
  case CT_OP_NEG: return -x;
  case CT_OP_ABS: return fabs(x);
  case CT_OP_EXP: return exp(x);
  case CT_OP_LOG: return log(x);
  case CT_OP_SQRT: return sqrt(x);
  case CT_OP_RELU: return isnan(x) ? x : (x > 0 ? x : 0.0);
  case CT_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case CT_OP_TANH: return tanh(x);
  case CT_OP_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
  default: return NAN;
  }
}

static inline bool ref_is_comparison(ct_binary_op op) {
  return op == CT_OP_EQ || op == CT_OP_NE || op == CT_OP_LT || op == CT_OP_LE || op == CT_OP_GT ||
         op == CT_OP_GE;
}

// The result dtype PyTorch gives a op b for tensors of dtypes a and b:
// comparisons give bool, integer (and bool) division is true division in
// the default float dtype, everything else the promoted dtype.
static inline ct_dtype ref_binary_result(ct_binary_op op, ct_dtype a, ct_dtype b) {
  if (ref_is_comparison(op)) return CT_BOOL;
  ct_dtype p = ref_promote(a, b);
  if (op == CT_OP_DIV && !ref_is_float(p)) return CT_F32;
  return p;
}

// The dtype of tensor(dtype t) op python-number s: a number does not widen
// the tensor's dtype, except that a float (non-integral) number makes an
// integer or bool tensor float32 and an int number makes a bool tensor int64.
static inline ct_dtype ref_scalar_result(ct_binary_op op, ct_dtype t, double s) {
  if (ref_is_comparison(op)) return CT_BOOL;
  bool integral = s == floor(s);
  ct_dtype p = ref_is_float(t) ? t : !integral ? CT_F32 : t == CT_BOOL ? CT_I64 : t;
  if (op == CT_OP_DIV && !ref_is_float(p)) return CT_F32;
  return p;
}

// Fails unless every element of t is within tol[i] of ref[i] (NaN matches
// NaN, inf the same inf); per-element tolerances for matmul and reductions.
static inline void ref_assert_within(const ct_tensor *t, const double *ref, const double *tol,
                                     const char *what) {
  if (!t) fail_msg("%s: tensor is NULL: %s", what, ct_last_error());
  double *got = tu_to_f64(t);
  if (!got) fail_msg("%s: could not read the tensor back: %s", what, ct_last_error());
  int64_t n = ct_numel(t);
  for (int64_t i = 0; i < n; ++i) {
    double g = got[i], r = ref[i];
    bool ok = isnan(r) ? isnan(g) : isinf(r) ? g == r : !isnan(g) && fabs(g - r) <= tol[i];
    if (!ok) {
      free(got);
      fail_msg("%s: element %lld of %lld: got %.17g, expected %.17g (tolerance %g)", what,
               (long long)i, (long long)n, g, r, tol[i]);
    }
  }
  free(got);
}

// Fails unless the last call failed with `status` and a message containing
// each of the given fragments (NULL-terminated).
static inline void ref_assert_error(ct_status status, const char *what, ...) {
  if (ct_last_status() != status)
    fail_msg("%s: status %s, expected %s (message: \"%s\")", what, ct_status_name(ct_last_status()),
             ct_status_name(status), ct_last_error());
  va_list ap;
  va_start(ap, what);
  for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
    if (!strstr(ct_last_error(), s)) {
      va_end(ap);
      fail_msg("%s: message \"%s\" does not contain \"%s\"", what, ct_last_error(), s);
    }
  va_end(ap);
}

// ---- reductions and matrix products --------------------------------------------
// torch.sum's result dtype: integers and bool sum to int64.
static inline ct_dtype ref_sum_dtype(ct_dtype dt) { return ref_is_float(dt) ? dt : CT_I64; }

// Unit roundoff of the accumulation: float32 for every float below float64.
static inline double ref_acc_eps(ct_dtype dt) {
  return dt == CT_F64 ? ref_eps(CT_F64) : ref_eps(CT_F32);
}

// The reference of `op` over the middle dim of x viewed as (outer, r, inner):
// ref (outer*inner) and, for sum/mean, per-output tolerances in tol.
static inline void ref_reduce(ct_reduce_op op, ct_dtype dt, const double *x, int64_t outer,
                              int64_t r, int64_t inner, double *ref, double *tol) {
  ct_dtype od = op == CT_OP_SUM ? ref_sum_dtype(dt) : op == CT_OP_ARGMAX ? CT_I64 : dt;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double s = 0, sa = 0, best = 0;
      int64_t arg = 0;
      bool nan_seen = false;
      for (int64_t j = 0; j < r; ++j) {
        double v = x[(o * r + j) * inner + i];
        s += v;
        sa += fabs(v);
        if (nan_seen) continue;
        if (isnan(v)) nan_seen = true, best = v, arg = j;
        else if (j == 0 || v > best) best = v, arg = j; // strict: the first max wins
      }
      double out;
      switch (op) {
      case CT_OP_SUM: out = s; break;
      case CT_OP_MEAN: out = s / (double)r, sa /= (double)r; break;
      case CT_OP_MAX: out = best; break;
      default: out = (double)arg; break;
      }
      int64_t k = o * inner + i;
      ref[k] = ref_cast(out, od);
      if (tol) {
        tol[k] = 0;
        if (ref_is_float(od) && (op == CT_OP_SUM || op == CT_OP_MEAN))
          // one ulp of od (the accumulated value may round the other way)
          // + the accumulation error of r terms, grown like sqrt(r) as
          // rounding errors of random sign do (n * eps is the worst case)
          tol[k] = 2.02 * ref_eps(od) * fabs(out) +
                   (4 * sqrt((double)r) + 4) * ref_acc_eps(dt) * sa + (dt == CT_F64 ? 1e-300 : 1e-30);
      }
    }
}

// Reference for a batch of products C = alpha * X @ Y + beta * C0, with x
// (batch, m, k) and y (batch, k, n) row-major and sxa / syb their batch
// strides (0 broadcasts one matrix). Fills ref and tol (batch, m, n): the
// tolerance is 1 ulp of C's dtype plus (4 sqrt(k) + 4) eps_acc (|X| @ |Y|)_ij,
// the dot-product error bound with rounding errors of random sign, where
// f16/bf16/f32 accumulate in float32 and f64 in float64.
static inline void ref_matmul(ct_dtype dt, const double *x, int64_t sxa, const double *y,
                              int64_t syb, int64_t batch, int64_t m, int64_t k, int64_t n,
                              double alpha, double beta, const double *c0, double *ref,
                              double *tol) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t l = 0; l < k; ++l) {
          double p = x[b * sxa + i * k + l] * y[b * syb + l * n + j];
          s += p;
          sa += fabs(p);
        }
        int64_t o = (b * m + i) * n + j;
        double v = alpha * s, va = fabs(alpha) * sa;
        if (c0 && beta != 0) v += beta * c0[o], va += fabs(beta * c0[o]);
        ref[o] = ref_cast(v, dt);
        tol[o] = 2.02 * ref_eps(dt) * fabs(v) + (4 * sqrt((double)k) + 4) * ref_acc_eps(dt) * va + 1e-30;
      }
}

// ---- modules (test_nn.c, test_conv.c) -------------------------------------------------
// The module's state entry (parameter or buffer) of that dotted name; fails the test if absent.
static inline ct_param *ref_param(ct_module *m, const char *name) {
  int n = 0;
  ct_param **s = ct_module_state(m, &n);
  for (int i = 0; i < n; ++i)
    if (!strcmp(s[i]->name, name)) return s[i];
  fail_msg("no state entry \"%s\"", name);
  return NULL;
}

// The tensor's values as doubles (caller frees); fails the test on NULL or a failed read.
static inline double *ref_values(const ct_tensor *t) {
  if (!t) fail_msg("NULL tensor: %s", ct_last_error());
  double *v = tu_to_f64(t);
  if (!v) fail_msg("could not read a tensor back: %s", ct_last_error());
  return v;
}

// Moves m to the device under test.
static inline ct_module *ref_on_device(ct_module *m) {
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

// Fails unless t equals ref within the rounding of a sum whose k terms have
// absolute sum sa[i]: 2 ulp of the result plus (4 sqrt(k) + 4) eps |terms|
// (float32 or float64 eps by t's dtype), as the matmul tolerance.
static inline void ref_assert_sum_close(const ct_tensor *t, const double *ref, const double *sa,
                                        int64_t k, const char *what) {
  int64_t n = ct_numel(t);
  double *tol = ref_alloc(n);
  double eps = ct_dtype_of(t) == CT_F64 ? ref_eps(CT_F64) : ref_eps(CT_F32);
  for (int64_t i = 0; i < n; ++i)
    tol[i] = 2.02 * eps * fabs(ref[i]) + (4 * sqrt((double)k) + 4) * eps * sa[i] + 1e-30;
  ref_assert_within(t, ref, tol, what);
  free(tol);
}

#endif
