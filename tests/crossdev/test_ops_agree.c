// SPDX-License-Identifier: MIT
//
// crossdev test_ops_agree (ctest crossdev.ops_agree and crossdev_gpu.ops_agree;
// not test_ops, which is the unit test's target name): one battery of ops,
// run from identical inputs on every device asked for.
//
// Invariant checked -- the cross-device contract: with `--devices cpu` every
// op's CPU result matches the float64 reference computed here (tu_ref.h),
// within its dtype's tolerance; with `--devices cpu,cuda` the GPU's result
// matches the same reference AND the CPU's result: within the dtype
// tolerance for floating arithmetic, exactly for integer and bool results,
// for copies and casts, for max/argmax and for ct_rand after the same
// ct_manual_seed. Inputs are fresh random values made once on the host and
// uploaded to each device, so any disagreement is the devices' arithmetic.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

static const ct_dtype all_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16, CT_I32, CT_I64, CT_U8, CT_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))
static const ct_dtype float_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16};

typedef enum { K_BINARY, K_SCALAR, K_UNARY, K_REDUCE, K_MATMUL, K_CAST, K_CONTIG } kind;

// One op on given inputs. a's logical shape is sa; with `ta` a is built as
// the transpose of a contiguous tensor of the reversed (2-d) shape.
typedef struct {
  kind k;
  int op;            // ct_binary_op, ct_unary_op or ct_reduce_op
  ct_dtype da, db;   // input dtypes (K_CAST: db is the target dtype)
  ct_shape sa, sb;   // K_MATMUL: (B, m, k) / (B, k, n) or 2-d
  bool ta;
  double s;          // K_SCALAR
  int dim;           // K_REDUCE: CT_MAX_DIMS means over everything
  bool keep;
  double *x, *y;     // logical values of a and b
} spec;

// ---- on a device --------------------------------------------------------------------------
static ct_tensor *upload_a(const spec *p, ct_device d) {
  if (!p->ta) return tu_from_f64(p->x, p->sa, p->da, d);
  int64_t r = p->sa.d[0], c = p->sa.d[1];
  double *base = ref_alloc(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) base[j * r + i] = p->x[i * c + j];
  ct_tensor *b = tu_from_f64(base, CT_SHAPE(c, r), p->da, d);
  free(base);
  if (!b) return NULL;
  ct_tensor *t = ct_t(b);
  ct_free(b);
  return t;
}

static ct_tensor *compute(const spec *p, ct_device d) {
  ct_tensor *a = upload_a(p, d), *b = NULL, *c = NULL;
  TU_CHECK(a);
  if (p->k == K_BINARY || p->k == K_MATMUL) {
    b = tu_from_f64(p->y, p->sb, p->db, d);
    TU_CHECK(b);
  }
  switch (p->k) {
  case K_BINARY: c = ct_binary((ct_binary_op)p->op, a, b); break;
  case K_SCALAR: c = ct_binary_scalar((ct_binary_op)p->op, a, p->s); break;
  case K_UNARY: c = ct_unary((ct_unary_op)p->op, a); break;
  case K_MATMUL: c = ct_matmul(a, b); break;
  case K_CAST: c = ct_to(a, d, p->db, false); break;
  case K_CONTIG: c = ct_contiguous(a); break;
  case K_REDUCE: {
    bool all = p->dim == CT_MAX_DIMS;
    switch ((ct_reduce_op)p->op) {
    case CT_OP_SUM: c = all ? ct_sum(a) : ct_sum_dim(a, p->dim, p->keep); break;
    case CT_OP_MEAN: c = all ? ct_mean(a) : ct_mean_dim(a, p->dim, p->keep); break;
    case CT_OP_MAX: c = all ? ct_max(a) : ct_max_dim(a, p->dim, p->keep, NULL); break;
    default: c = all ? ct_argmax(a) : ct_argmax_dim(a, p->dim, p->keep); break;
    }
    break;
  }
  }
  ct_free(a);
  ct_free(b);
  return c;
}

// ---- the reference -------------------------------------------------------------------------
typedef struct {
  ct_shape shape;
  ct_dtype dtype;
  bool exact; // devices must agree bit for bit (as values)
  int64_t n;
  double *ref, *tol;
} expected;

static void reference(const spec *p, expected *e) {
  int64_t na = ct_shape_numel(p->sa);
  switch (p->k) {
  case K_BINARY: {
    assert_true(ref_broadcast(p->sa, p->sb, &e->shape));
    ct_binary_op op = (ct_binary_op)p->op;
    e->dtype = ref_binary_result(op, p->da, p->db);
    e->n = ct_shape_numel(e->shape);
    e->ref = ref_alloc(e->n), e->tol = ref_alloc(e->n);
    double rt = tu_rtol(e->dtype) * (op == CT_OP_POW ? 4 : 1);
    for (int64_t i = 0; i < e->n; ++i) {
      double v = ref_binary_value(op, p->x[ref_bcast_index(i, e->shape, p->sa)],
                                  p->y[ref_bcast_index(i, e->shape, p->sb)]);
      e->ref[i] = ref_cast(v, e->dtype);
      e->tol[i] = rt * fabs(e->ref[i]) + tu_atol(e->dtype);
    }
    e->exact = !ref_is_float(e->dtype) && op != CT_OP_DIV; // int pow is exact
    break;
  }
  case K_SCALAR: case K_UNARY: case K_CAST: case K_CONTIG: {
    e->shape = p->sa;
    e->n = na;
    e->ref = ref_alloc(na), e->tol = ref_alloc(na);
    if (p->k == K_SCALAR) e->dtype = ref_scalar_result((ct_binary_op)p->op, p->da, p->s);
    else if (p->k == K_CAST) e->dtype = p->db;
    else if (p->k == K_CONTIG) e->dtype = p->da;
    else {
      ct_unary_op op = (ct_unary_op)p->op;
      bool needs_float = op == CT_OP_EXP || op == CT_OP_LOG || op == CT_OP_SQRT ||
                         op == CT_OP_SIGMOID || op == CT_OP_TANH;
      e->dtype = op == CT_OP_ISFINITE ? CT_BOOL : needs_float && !ref_is_float(p->da) ? CT_F32 : p->da;
    }
    double rt = tu_rtol(e->dtype) * (p->k == K_SCALAR && p->op == CT_OP_POW ? 4 : 1);
    for (int64_t i = 0; i < na; ++i) {
      double v = p->k == K_SCALAR ? ref_binary_value((ct_binary_op)p->op, p->x[i], p->s)
                 : p->k == K_UNARY ? ref_unary_value((ct_unary_op)p->op, p->x[i])
                                   : p->x[i];
      e->ref[i] = ref_cast(v, e->dtype);
      e->tol[i] = p->k == K_CAST || p->k == K_CONTIG ? 0 : rt * fabs(e->ref[i]) + tu_atol(e->dtype);
    }
    e->exact = p->k == K_CAST || p->k == K_CONTIG || !ref_is_float(e->dtype);
    break;
  }
  case K_REDUCE: {
    bool all = p->dim == CT_MAX_DIMS;
    int d = all ? 0 : (p->dim < 0 ? p->dim + p->sa.ndim : p->dim);
    int64_t outer = 1, r = all ? na : p->sa.d[d], inner = 1;
    ct_shape s = {0, {0}};
    if (!all)
      for (int i = 0; i < p->sa.ndim; ++i) {
        if (i < d) outer *= p->sa.d[i];
        if (i > d) inner *= p->sa.d[i];
        if (i != d) s.d[s.ndim++] = p->sa.d[i];
        else if (p->keep) s.d[s.ndim++] = 1;
      }
    e->shape = s;
    e->n = outer * inner;
    e->ref = ref_alloc(e->n), e->tol = ref_alloc(e->n);
    ct_reduce_op op = (ct_reduce_op)p->op;
    e->dtype = op == CT_OP_SUM ? ref_sum_dtype(p->da) : op == CT_OP_ARGMAX ? CT_I64 : p->da;
    ref_reduce(op, p->da, p->x, outer, r, inner, e->ref, e->tol);
    e->exact = op == CT_OP_MAX || op == CT_OP_ARGMAX || !ref_is_float(e->dtype);
    break;
  }
  case K_MATMUL: {
    bool batched = p->sa.ndim == 3;
    int64_t B = batched ? p->sa.d[0] : 1, m = p->sa.d[batched], k = p->sa.d[batched + 1],
            n = p->sb.d[p->sb.ndim - 1];
    e->shape = batched ? CT_SHAPE(B, m, n) : CT_SHAPE(m, n);
    e->dtype = p->da;
    e->n = B * m * n;
    e->ref = ref_alloc(e->n), e->tol = ref_alloc(e->n);
    ref_matmul(p->da, p->x, m * k, p->y, p->sb.ndim == 3 ? k * n : 0, B, m, k, n, 1, 0, NULL,
               e->ref, e->tol);
    e->exact = false;
    break;
  }
  }
}

// Runs p on every device: each against the reference, then each against the
// first device (the CPU).
static void run_spec(const spec *p, const char *what) {
  expected e;
  reference(p, &e);
  double *first = NULL;
  for (int di = 0; di < tu_ndevices; ++di) {
    ct_device d = tu_devices[di];
    char w[200], ds[CT_DEVICE_STR_MAX];
    snprintf(w, sizeof w, "%s on %s", what, ct_device_str(d, ds));
    ct_tensor *c = compute(p, d);
    if (!c) fail_msg("%s: failed: %s", w, ct_last_error());
    ref_assert_shape(c, e.shape, w);
    ref_assert_dtype(c, e.dtype, w);
    if (!ct_device_eq(ct_device_of(c), d)) fail_msg("%s: result on the wrong device", w);
    ref_assert_within(c, e.ref, e.tol, w);
    double *got = tu_to_f64(c);
    if (!got) fail_msg("%s: could not read back: %s", w, ct_last_error());
    ct_free(c);
    if (!first) {
      first = got;
      continue;
    }
    for (int64_t i = 0; i < e.n; ++i) {
      double g = got[i], f = first[i];
      bool same = (isnan(g) && isnan(f)) || g == f;
      bool ok = same || (!e.exact && !isnan(g) && !isnan(f) && fabs(g - f) <= e.tol[i]);
      if (!ok) {
        free(got);
        free(first);
        fail_msg("%s: element %lld: %.17g here, %.17g on the CPU (%s, tolerance %g)", w, (long long)i,
                 g, f, e.exact ? "must be equal" : "within", e.tol[i]);
      }
    }
    free(got);
  }
  free(first);
  free(e.ref);
  free(e.tol);
}

// ---- inputs ------------------------------------------------------------------------------
static void fill_inputs(double *x, int64_t n, ct_dtype dt, double lo, double hi) {
  if (dt == CT_U8) {
    if (lo < 0) lo = 0;
    if (hi > 128) hi = 128;
  }
  ref_random(x, n, dt, lo, hi);
}

static void binary_range(ct_binary_op op, ct_dtype dt, int operand, double *lo, double *hi) {
  bool fl = ref_is_float(dt);
  *lo = fl ? -20 : -500, *hi = fl ? 20 : 500;
  if (op == CT_OP_POW) *lo = operand ? (fl ? -2 : 0) : (fl ? 0.1 : 0), *hi = operand ? 3 : (fl ? 4 : 6);
  if (op == CT_OP_DIV && operand) *lo = fl ? 0.5 : 1, *hi = 9;
}

// ---- the battery ---------------------------------------------------------------------------
static void test_binary(void **state) {
  (void)state;
  for (int op = 0; op < CT_NUM_BINARY_OPS; ++op)
    for (int k = 0; k < NDT; ++k) {
      ct_dtype dt = all_dtypes[k];
      if (dt == CT_BOOL && (op == CT_OP_SUB || op == CT_OP_POW)) continue;
      for (int form = 0; form < 2; ++form) {
        // (17, 1) x (1, 33) broadcast; then a transposed (17, 33) x (33,)
        spec p = {.k = K_BINARY, .op = op, .da = dt, .db = dt, .ta = form == 1,
                  .sa = form ? CT_SHAPE(17, 33) : CT_SHAPE(17, 1), .sb = form ? CT_SHAPE(33) : CT_SHAPE(1, 33)};
        double lo, hi;
        int64_t na = ct_shape_numel(p.sa), nb = ct_shape_numel(p.sb);
        p.x = ref_alloc(na), p.y = ref_alloc(nb);
        binary_range((ct_binary_op)op, dt, 0, &lo, &hi);
        fill_inputs(p.x, na, dt, lo, hi);
        binary_range((ct_binary_op)op, dt, 1, &lo, &hi);
        fill_inputs(p.y, nb, dt, lo, hi);
        if (op >= CT_OP_EQ) p.y[0] = p.x[0], p.y[nb - 1] = p.x[na - 1]; // some equal pairs
        char what[96];
        snprintf(what, sizeof what, "%s %s form %d", ct_binary_op_name((ct_binary_op)op), ct_dtype_name(dt), form);
        run_spec(&p, what);
        free(p.x), free(p.y);
      }
    }
  // Mixed dtypes and a size past one GPU block / the CPU's thread threshold.
  static const struct { ct_binary_op op; ct_dtype a, b; int64_t n; } big[] = {
      {CT_OP_ADD, CT_F32, CT_F32, 70001}, {CT_OP_MUL, CT_F16, CT_F16, 70001},
      {CT_OP_MAXIMUM, CT_I32, CT_I32, 70001}, {CT_OP_ADD, CT_I32, CT_F32, 999},
      {CT_OP_MUL, CT_F16, CT_BF16, 999}, {CT_OP_DIV, CT_I64, CT_I64, 999}, {CT_OP_SUB, CT_U8, CT_I64, 999},
      {CT_OP_LT, CT_BF16, CT_F64, 999}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; ++i) {
    spec p = {.k = K_BINARY, .op = big[i].op, .da = big[i].a, .db = big[i].b, .sa = CT_SHAPE(big[i].n),
              .sb = CT_SHAPE(big[i].n)};
    double lo, hi;
    p.x = ref_alloc(big[i].n), p.y = ref_alloc(big[i].n);
    binary_range(big[i].op, ref_promote(p.da, p.db), 0, &lo, &hi);
    fill_inputs(p.x, big[i].n, p.da, lo, hi);
    binary_range(big[i].op, ref_promote(p.da, p.db), 1, &lo, &hi);
    fill_inputs(p.y, big[i].n, p.db, lo, hi);
    char what[96];
    snprintf(what, sizeof what, "%s %s x %s n=%lld", ct_binary_op_name(big[i].op), ct_dtype_name(p.da),
             ct_dtype_name(p.db), (long long)big[i].n);
    run_spec(&p, what);
    free(p.x), free(p.y);
  }
}

static void test_scalar(void **state) {
  (void)state;
  const ct_binary_op ops[] = {CT_OP_ADD, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV, CT_OP_POW, CT_OP_MAXIMUM, CT_OP_LT};
  const double scalars[] = {2.5, 3.0};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o)
    for (int k = 0; k < NDT; ++k)
      for (int si = 0; si < 2; ++si) {
        ct_dtype dt = all_dtypes[k];
        if (dt == CT_BOOL && (ops[o] == CT_OP_SUB || ops[o] == CT_OP_POW)) continue;
        spec p = {.k = K_SCALAR, .op = ops[o], .da = dt, .sa = CT_SHAPE(301), .s = scalars[si]};
        double lo, hi;
        binary_range(ops[o], dt, 0, &lo, &hi);
        p.x = ref_alloc(301);
        fill_inputs(p.x, 301, dt, lo, hi);
        char what[96];
        snprintf(what, sizeof what, "%s(%s, %g)", ct_binary_op_name(ops[o]), ct_dtype_name(dt), p.s);
        run_spec(&p, what);
        free(p.x);
      }
}

static void test_unary(void **state) {
  (void)state;
  for (int op = 0; op < CT_NUM_UNARY_OPS; ++op)
    for (int k = 0; k < NDT; ++k) {
      ct_dtype dt = all_dtypes[k];
      if (dt == CT_BOOL && (op == CT_OP_NEG || op == CT_OP_ABS || op == CT_OP_RELU)) continue;
      if (dt == CT_U8 && op == CT_OP_NEG) continue;
      double lo = -8, hi = 8;
      if (op == CT_OP_LOG || op == CT_OP_SQRT) lo = ref_is_float(dt) ? 0.01 : 1, hi = 100;
      spec p = {.k = K_UNARY, .op = op, .da = dt, .sa = CT_SHAPE(40, 25), .ta = true};
      p.x = ref_alloc(1000);
      fill_inputs(p.x, 1000, dt, lo, hi);
      if (ref_is_float(dt)) { // the domain's edges, everywhere
        const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -1.0, -0.0};
        for (int i = 0; i < 6; ++i) p.x[i * 97] = ref_cast(sp[i], dt);
      }
      char what[96];
      snprintf(what, sizeof what, "%s(%s)", ct_unary_op_name((ct_unary_op)op), ct_dtype_name(dt));
      run_spec(&p, what);
      free(p.x);
    }
}

static void test_reduce(void **state) {
  (void)state;
  const ct_shape s = CT_SHAPE(6, 7, 8);
  const int dims[] = {CT_MAX_DIMS, 0, 1, -1};
  for (int op = 0; op < CT_NUM_REDUCE_OPS; ++op)
    for (int k = 0; k < NDT; ++k)
      for (int di = 0; di < 4; ++di) {
        ct_dtype dt = all_dtypes[k];
        if (op == CT_OP_MEAN && !ref_is_float(dt)) continue;
        spec p = {.k = K_REDUCE, .op = op, .da = dt, .sa = s, .dim = dims[di], .keep = di == 2};
        p.x = ref_alloc(336);
        fill_inputs(p.x, 336, dt, ref_is_float(dt) ? -10 : -100, ref_is_float(dt) ? 10 : 100);
        if (!ref_is_float(dt)) // ties
          for (int i = 0; i < 336; i += 5) p.x[i] = p.x[0];
        char what[96];
        snprintf(what, sizeof what, "reduce %d of %s dim %d", op, ct_dtype_name(dt), dims[di]);
        run_spec(&p, what);
        // NaN planted: max/argmax must point at the same NaN on each device.
        if (ref_is_float(dt)) {
          p.x[17] = NAN, p.x[200] = NAN, p.x[201] = INFINITY;
          for (int i = 0; i < 336; ++i) p.x[i] = ref_cast(p.x[i], dt);
          strncat(what, " with NaN", sizeof what - strlen(what) - 1);
          run_spec(&p, what);
        }
        free(p.x);
      }
  // Long reductions: 1e6 float32 terms overall and (3, 300, 300) bf16 over dim 1.
  spec big = {.k = K_REDUCE, .op = CT_OP_SUM, .da = CT_F32, .sa = CT_SHAPE(1000000), .dim = CT_MAX_DIMS};
  big.x = ref_alloc(1000000);
  fill_inputs(big.x, 1000000, CT_F32, 0, 1);
  for (int op = 0; op < CT_NUM_REDUCE_OPS; ++op) {
    big.op = op;
    run_spec(&big, "reduce of 1e6 float32");
  }
  free(big.x);
  spec mid = {.k = K_REDUCE, .op = CT_OP_SUM, .da = CT_BF16, .sa = CT_SHAPE(3, 300, 300), .dim = 1};
  mid.x = ref_alloc(270000);
  fill_inputs(mid.x, 270000, CT_BF16, -1, 1);
  run_spec(&mid, "sum of (3, 300, 300) bfloat16 over dim 1");
  mid.op = CT_OP_ARGMAX;
  run_spec(&mid, "argmax of (3, 300, 300) bfloat16 over dim 1");
  free(mid.x);
}

static void test_matmul(void **state) {
  (void)state;
  static const struct { ct_shape a, b; bool ta; } cases[] = {
      {CT_SHAPE(7, 13), CT_SHAPE(13, 5), false}, {CT_SHAPE(64, 128), CT_SHAPE(128, 96), false},
      {CT_SHAPE(33, 17), CT_SHAPE(17, 9), true},  {CT_SHAPE(1, 1), CT_SHAPE(1, 1), false},
      {CT_SHAPE(4, 7, 13), CT_SHAPE(4, 13, 5), false}, {CT_SHAPE(3, 5, 6), CT_SHAPE(6, 2), false}};
  for (int k = 0; k < 4; ++k)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
      spec p = {.k = K_MATMUL, .da = float_dtypes[k], .db = float_dtypes[k], .sa = cases[c].a,
                .sb = cases[c].b, .ta = cases[c].ta};
      int64_t na = ct_shape_numel(p.sa), nb = ct_shape_numel(p.sb);
      p.x = ref_alloc(na), p.y = ref_alloc(nb);
      fill_inputs(p.x, na, p.da, -1, 1);
      fill_inputs(p.y, nb, p.db, -1, 1);
      char what[96];
      snprintf(what, sizeof what, "matmul %s case %zu", ct_dtype_name(p.da), c);
      run_spec(&p, what);
      free(p.x), free(p.y);
    }
}

// Casts and copies agree exactly: every pair of dtypes, and contiguous() of
// a transposed view.
static void test_casts(void **state) {
  (void)state;
  for (int i = 0; i < NDT; ++i)
    for (int j = 0; j < NDT; ++j) {
      ct_dtype s = all_dtypes[i], d = all_dtypes[j];
      spec p = {.k = K_CAST, .da = s, .db = d, .sa = CT_SHAPE(9, 31), .ta = (i + j) % 2 == 1};
      p.x = ref_alloc(279);
      bool u = s == CT_U8 || d == CT_U8;
      fill_inputs(p.x, 279, s, u ? 0 : -300, u ? 250 : 300);
      for (int k = 0; k < 279; k += 7) p.x[k] = 0;
      char what[96];
      snprintf(what, sizeof what, "cast %s -> %s", ct_dtype_name(s), ct_dtype_name(d));
      run_spec(&p, what);
      p.k = K_CONTIG;
      p.ta = true;
      snprintf(what, sizeof what, "contiguous of a transposed %s", ct_dtype_name(s));
      if (j == 0) run_spec(&p, what);
      free(p.x);
    }
}

// Creation on each device: full, arange and any_nonfinite give the same.
static void test_creation(void **state) {
  (void)state;
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double v = dt == CT_BOOL ? 1 : ref_is_float(dt) ? -1.7 : 123, ref[1000];
    for (int di = 0; di < tu_ndevices; ++di) {
      ct_tensor *t = ct_full(CT_SHAPE(10, 100), v, dt, tu_devices[di]);
      TU_CHECK(t);
      for (int i = 0; i < 1000; ++i) ref[i] = ref_cast(v, dt);
      tu_assert_close(t, ref, 0, 0, "full");
      ct_free(t);
      if (dt == CT_BOOL) continue;
      // Integer dtypes take integer steps: a fractional step's truncation
      // depends on the arithmetic's precision (torch's too).
      bool fl = ref_is_float(dt);
      double start = dt == CT_U8 ? 0 : -3, end = dt == CT_U8 ? 250 : 690, step = fl ? 0.7 : 7;
      t = ct_arange(start, end, step, dt, tu_devices[di]);
      TU_CHECK(t);
      int64_t n = ct_numel(t);
      assert_int_equal(n, (int64_t)ceil((end - start) / step));
      double tol[1000];
      for (int64_t i = 0; i < n; ++i) {
        ref[i] = ref_cast(start + (double)i * step, dt);
        // start + i * step may be formed in the dtype's own precision
        tol[i] = 2 * ref_eps(dt) * (fabs(start) + fabs((double)i * step)) + 2 * ref_eps(dt) * fabs(ref[i]);
      }
      ref_assert_within(t, ref, tol, "arange");
      ct_free(t);
    }
  }
  // any_nonfinite on each device from the same data.
  double *x = ref_alloc(100000);
  for (int k = 0; k < 4; ++k) {
    fill_inputs(x, 100000, float_dtypes[k], -1, 1);
    x[99999] = NAN;
    for (int di = 0; di < tu_ndevices; ++di) {
      ct_tensor *t = tu_from_f64(x, CT_SHAPE(100000), float_dtypes[k], tu_devices[di]);
      TU_CHECK(t);
      bool any = false;
      TU_OK(ct_any_nonfinite(t, &any));
      assert_true(any);
      ct_tensor *v = ct_narrow(t, 0, 0, 99999);
      TU_CHECK(v);
      TU_OK(ct_any_nonfinite(v, &any));
      assert_false(any);
      ct_free(v);
      ct_free(t);
    }
  }
  free(x);
}

// ct_manual_seed: the same seed gives the same ct_rand on every device
// (bit for bit) and the same ct_randn within eight ulps (the devices' own
// log/sin/cos); a different seed gives different numbers.
static void test_manual_seed(void **state) {
  (void)state;
  const int64_t n = 10001;
  for (int k = 0; k < 4; ++k) {
    ct_dtype dt = float_dtypes[k];
    double *u[2] = {NULL, NULL}, *z[2] = {NULL, NULL};
    for (int di = 0; di < tu_ndevices; ++di) {
      ct_manual_seed(tu_seed() + 7);
      ct_tensor *a = ct_rand(CT_SHAPE(n), dt, tu_devices[di]);
      ct_tensor *b = ct_randn(CT_SHAPE(n), dt, tu_devices[di]);
      TU_CHECK(a);
      TU_CHECK(b);
      u[di] = tu_to_f64(a), z[di] = tu_to_f64(b);
      assert_non_null(u[di]);
      assert_non_null(z[di]);
      ct_free(a), ct_free(b);
    }
    // Same seed again on the CPU: the same numbers; another seed: others.
    ct_manual_seed(tu_seed() + 7);
    ct_tensor *again = ct_rand(CT_SHAPE(n), dt, ct_device_cpu());
    TU_CHECK(again);
    tu_assert_close(again, u[0], 0, 0, "ct_rand after the same seed");
    ct_free(again);
    ct_manual_seed(tu_seed() + 8);
    ct_tensor *other = ct_rand(CT_SHAPE(n), dt, ct_device_cpu());
    TU_CHECK(other);
    double *o = tu_to_f64(other);
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += o[i] == u[0][i];
    if (same > n / 50)
      fail_msg("%lld of %lld values repeat under another seed", (long long)same, (long long)n);
    free(o);
    ct_free(other);
    const char *dn = ct_dtype_name(dt);
    for (int64_t i = 0; i < n; ++i) {
      long long li = (long long)i;
      if (!(u[0][i] >= 0 && u[0][i] <= 1)) fail_msg("rand %s [%lld] = %g outside [0, 1]", dn, li, u[0][i]);
      if (!isfinite(z[0][i])) fail_msg("randn %s [%lld] = %g", dn, li, z[0][i]);
      if (tu_ndevices < 2) continue;
      if (u[1][i] != u[0][i])
        fail_msg("ct_rand %s [%lld]: %.17g on cuda, %.17g on cpu", dn, li, u[1][i], u[0][i]);
      if (!(fabs(z[1][i] - z[0][i]) <= 16 * ref_eps(dt) * fabs(z[0][i]) + 1e-300))
        fail_msg("ct_randn %s [%lld]: %.17g on cuda, %.17g on cpu", dn, li, z[1][i], z[0][i]);
    }
    for (int di = 0; di < 2; ++di) free(u[di]), free(z[di]);
  }
  ct_manual_seed(tu_seed());
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_scalar),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_casts),
      cmocka_unit_test(test_creation),
      cmocka_unit_test(test_manual_seed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
