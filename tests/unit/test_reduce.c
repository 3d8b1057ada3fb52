// SPDX-License-Identifier: MIT
//
// test_reduce: sum, mean, max and argmax, over everything and over each dim,
// on the device under test.
//
// Invariant checked: each result equals the float64 reduction of the same
// inputs computed here, within a tolerance fitted to the dtype and to the
// number of terms r (a float32 accumulation of r terms is off by at most
// about r * eps * sum|x|; random rounding errors grow like sqrt(r)). Integer
// results, maxima and indices match exactly; ties go to the first index and
// NaN wins, as torch.max documents; result dtypes are torch's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

static const ct_dtype all_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16, CT_I32, CT_I64, CT_U8, CT_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))
static const ct_dtype float_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16};

// Reduces a (contiguous, shape s) over `dim` (or over everything when dim
// is CT_MAX_DIMS) with keepdim, and checks shape, dtype and values.
static void check_reduce(ct_reduce_op op, const ct_tensor *a, const double *x, ct_shape s, int dim,
                         bool keepdim) {
  ct_dtype dt = ct_dtype_of(a);
  bool all = dim == CT_MAX_DIMS;
  int d = all ? 0 : (dim < 0 ? dim + s.ndim : dim);
  int64_t outer = 1, r = all ? ct_shape_numel(s) : s.d[d], inner = 1;
  ct_shape want = {0, {0}};
  if (!all)
    for (int i = 0; i < s.ndim; ++i) {
      if (i < d) outer *= s.d[i];
      if (i > d) inner *= s.d[i];
      if (i != d) want.d[want.ndim++] = s.d[i];
      else if (keepdim) want.d[want.ndim++] = 1;
    }
  int64_t n = outer * inner;
  double *ref = ref_alloc(n), *tol = ref_alloc(n);
  ct_tensor *c = NULL, *idx = NULL;
  switch (op) {
  case CT_OP_SUM: c = all ? ct_sum(a) : ct_sum_dim(a, dim, keepdim); break;
  case CT_OP_MEAN: c = all ? ct_mean(a) : ct_mean_dim(a, dim, keepdim); break;
  case CT_OP_MAX: c = all ? ct_max(a) : ct_max_dim(a, dim, keepdim, &idx); break;
  default: c = all ? ct_argmax(a) : ct_argmax_dim(a, dim, keepdim); break;
  }
  char what[128], sb[64];
  static const char *names[] = {"sum", "mean", "max", "argmax"};
  snprintf(what, sizeof what, "%s(%s %s, dim %d%s)", names[op], ct_shape_str(s, sb, sizeof sb),
           ct_dtype_name(dt), all ? 99 : dim, keepdim ? ", keepdim" : "");
  TU_CHECK(c);
  ref_assert_shape(c, want, what);
  ct_dtype od = op == CT_OP_SUM ? ref_sum_dtype(dt) : op == CT_OP_ARGMAX ? CT_I64 : dt;
  ref_assert_dtype(c, od, what);
  ref_reduce(op, dt, x, outer, r, inner, ref, tol);
  ref_assert_within(c, ref, tol, what);
  if (idx) { // torch.max(dim) also returns the indices: argmax's
    ref_assert_shape(idx, want, what);
    ref_assert_dtype(idx, CT_I64, what);
    ref_reduce(CT_OP_ARGMAX, dt, x, outer, r, inner, ref, NULL);
    tu_assert_close(idx, ref, 0, 0, what);
    ct_free(idx);
  }
  ct_free(c);
  free(ref);
  free(tol);
}

static void range_of(ct_dtype dt, double *lo, double *hi) {
  switch (dt) {
  case CT_U8: *lo = 0, *hi = 200; break;
  case CT_I32: case CT_I64: *lo = -1000, *hi = 1000; break;
  default: *lo = -10, *hi = 10; break;
  }
}

// Every reduction, every dtype, every dim (positive and negative), keepdim
// both ways, and over everything.
static void test_reduce_all_dims(void **state) {
  (void)state;
  const ct_shape s = CT_SHAPE(4, 5, 6);
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double lo, hi, *x;
    range_of(dt, &lo, &hi);
    ct_tensor *a = ref_tensor(s, dt, tu_device, lo, hi, &x);
    for (int op = 0; op < CT_NUM_REDUCE_OPS; ++op) {
      if (op == CT_OP_MEAN && !ref_is_float(dt)) continue; // an error (test_errors)
      check_reduce((ct_reduce_op)op, a, x, s, CT_MAX_DIMS, false);
      for (int dim = -3; dim < 3; ++dim)
        for (int keep = 0; keep < 2; ++keep) check_reduce((ct_reduce_op)op, a, x, s, dim, keep);
    }
    ct_free(a);
    free(x);
  }
}

// Odd shapes: 1-d, 0-d, size-1 dims, a long inner dim and a long r.
static void test_reduce_shapes(void **state) {
  (void)state;
  const ct_shape shapes[] = {CT_SHAPE(1), CT_SHAPE(17), CT_SHAPE(1, 1, 1), CT_SHAPE(3, 1, 2),
                             CT_SHAPE(2, 1000, 3), CT_SHAPE(5000, 7), CT_SHAPE(3, 300, 300)};
  const ct_dtype dts[] = {CT_F32, CT_BF16, CT_I32};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
    for (int k = 0; k < 3; ++k) {
      ct_shape s = shapes[si];
      double lo, hi, *x;
      range_of(dts[k], &lo, &hi);
      ct_tensor *a = ref_tensor(s, dts[k], tu_device, lo, hi, &x);
      for (int op = 0; op < CT_NUM_REDUCE_OPS; ++op) {
        if (op == CT_OP_MEAN && !ref_is_float(dts[k])) continue;
        check_reduce((ct_reduce_op)op, a, x, s, CT_MAX_DIMS, false);
        for (int dim = 0; dim < s.ndim; ++dim) check_reduce((ct_reduce_op)op, a, x, s, dim, dim & 1);
      }
      ct_free(a);
      free(x);
    }
  // 0-d input: reducing over dim 0 (or -1) is allowed and gives a 0-d result.
  double v = 2.5;
  ct_tensor *z = tu_from_f64(&v, CT_SCALAR_SHAPE, CT_F32, tu_device);
  TU_CHECK(z);
  ct_tensor *s0 = ct_sum_dim(z, 0, false), *m0 = ct_max_dim(z, -1, true, NULL), *s1 = ct_sum(z);
  TU_CHECK(s0);
  TU_CHECK(m0);
  TU_CHECK(s1);
  assert_int_equal(ct_ndim(s0), 0);
  assert_int_equal(ct_ndim(s1), 0);
  tu_assert_close(s0, &v, 0, 0, "sum_dim of a 0-d tensor");
  tu_assert_close(m0, &v, 0, 0, "max_dim of a 0-d tensor");
  ct_free(s0), ct_free(m0), ct_free(s1), ct_free(z);
}

// Non-contiguous inputs reduce in their logical order.
static void test_reduce_noncontiguous(void **state) {
  (void)state;
  for (int k = 0; k < 4; ++k) {
    ct_dtype dt = float_dtypes[k];
    double *x;
    ct_tensor *base = ref_tensor(CT_SHAPE(6, 4, 5), dt, tu_device, -10, 10, &x);
    ct_tensor *v = ct_permute(base, (int[]){2, 0, 1}); // (5, 6, 4)
    TU_CHECK(v);
    double *xv = ref_alloc(120);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 6; ++j)
        for (int l = 0; l < 4; ++l) xv[(i * 6 + j) * 4 + l] = x[(j * 4 + l) * 5 + i];
    for (int op = 0; op < CT_NUM_REDUCE_OPS; ++op) {
      check_reduce((ct_reduce_op)op, v, xv, CT_SHAPE(5, 6, 4), CT_MAX_DIMS, false);
      for (int dim = 0; dim < 3; ++dim) check_reduce((ct_reduce_op)op, v, xv, CT_SHAPE(5, 6, 4), dim, false);
    }
    ct_free(v);
    ct_free(base);
    free(x);
    free(xv);
  }
}

// Ties: the first maximum wins, overall (flat index) and per dim.
static void test_ties(void **state) {
  (void)state;
  const ct_shape s = CT_SHAPE(7, 9, 5);
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double *x;
    ct_tensor *a = ref_tensor(s, dt, tu_device, 0, 3, &x); // values 0, 1, 2: many ties
    if (ref_is_float(dt)) {
      for (int i = 0; i < 315; ++i) x[i] = floor(x[i]);
      ct_free(a);
      a = tu_from_f64(x, s, dt, tu_device);
      TU_CHECK(a);
    }
    for (int dim = -1; dim < 3; ++dim) {
      check_reduce(CT_OP_ARGMAX, a, x, s, dim < 0 ? CT_MAX_DIMS : dim, false);
      if (dim >= 0) check_reduce(CT_OP_MAX, a, x, s, dim, true);
    }
    ct_free(a);
    free(x);
  }
  // All equal: index 0.
  ct_tensor *o = ct_ones(CT_SHAPE(1000), CT_F16, tu_device);
  TU_CHECK(o);
  ct_tensor *am = ct_argmax(o);
  TU_CHECK(am);
  const double zero = 0;
  tu_assert_close(am, &zero, 0, 0, "argmax of all-equal values");
  ct_free(am), ct_free(o);
}

// NaN: sum and mean become NaN, max is NaN and argmax points at the first NaN.
static void test_nan(void **state) {
  (void)state;
  const ct_shape s = CT_SHAPE(6, 7, 8);
  for (int k = 0; k < 4; ++k) {
    ct_dtype dt = float_dtypes[k];
    double *x, pos[6];
    ct_tensor *a = ref_tensor(s, dt, tu_device, -10, 10, &x);
    ct_free(a);
    tu_fill_uniform(pos, 6, 0, 336);
    for (int i = 0; i < 6; ++i) x[(int)pos[i]] = NAN;
    x[100] = INFINITY; // an inf beside the NaNs: NaN still wins where both are
    x[200] = -INFINITY;
    a = tu_from_f64(x, s, dt, tu_device);
    TU_CHECK(a);
    for (int op = 0; op < CT_NUM_REDUCE_OPS; ++op) {
      check_reduce((ct_reduce_op)op, a, x, s, CT_MAX_DIMS, false);
      for (int dim = 0; dim < 3; ++dim) check_reduce((ct_reduce_op)op, a, x, s, dim, false);
    }
    ct_free(a);
    free(x);
  }
}

// Large r: 1e6 float32 terms. Naive float32 accumulation errs by at most
// about n * eps * sum|x| and typically sqrt(n) * eps * sum|x| (rounding errors
// of random sign); the tolerance is 4 sqrt(n) eps sum|x|, 2.4e-4 relative for
// positive inputs -- loose enough for a GPU's float accumulation, tight
// enough to catch a lost block of a few hundred elements.
static void test_large_sum(void **state) {
  (void)state;
  const int64_t n = 1000000;
  for (int k = 0; k < 2; ++k) {
    ct_dtype dt = k ? CT_F64 : CT_F32;
    double *x;
    ct_tensor *a = ref_tensor(CT_SHAPE(n), dt, tu_device, 0, 1, &x);
    double sum = 0, sa = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i], sa += fabs(x[i]);
    double tol = 4 * sqrt((double)n) * ref_eps(dt) * sa + ref_eps(dt) * fabs(sum);
    ct_tensor *s = ct_sum(a), *m = ct_mean(a), *mx = ct_max(a), *am = ct_argmax(a);
    TU_CHECK(s);
    TU_CHECK(m);
    TU_CHECK(mx);
    TU_CHECK(am);
    double got;
    TU_OK(ct_item(s, &got));
    if (!(fabs(got - sum) <= tol))
      fail_msg("sum of %lld %s: got %.10g, expected %.10g (tolerance %g)", (long long)n,
               ct_dtype_name(dt), got, sum, tol);
    TU_OK(ct_item(m, &got));
    if (!(fabs(got - sum / (double)n) <= tol / (double)n))
      fail_msg("mean of %lld %s: got %.10g, expected %.10g", (long long)n, ct_dtype_name(dt), got,
               sum / (double)n);
    double best = x[0];
    int64_t arg = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[i] > best) best = x[i], arg = i;
    tu_assert_close(mx, &best, 0, 0, "max of 1e6");
    double argd = (double)arg;
    tu_assert_close(am, &argd, 0, 0, "argmax of 1e6");
    // Per dim on (1000, 1000): columns and rows.
    ct_tensor *a2 = ct_reshape(a, CT_SHAPE(1000, 1000));
    TU_CHECK(a2);
    check_reduce(CT_OP_SUM, a2, x, CT_SHAPE(1000, 1000), 0, false);
    check_reduce(CT_OP_SUM, a2, x, CT_SHAPE(1000, 1000), 1, false);
    check_reduce(CT_OP_ARGMAX, a2, x, CT_SHAPE(1000, 1000), 0, false);
    ct_free(a2), ct_free(s), ct_free(m), ct_free(mx), ct_free(am), ct_free(a);
    free(x);
  }
  // Integer sums are exact in int64, past int32's range.
  const int64_t n2 = 300000;
  double *x = ref_alloc(n2);
  for (int64_t i = 0; i < n2; ++i) x[i] = 2000000000.0 - (double)(i % 3);
  ct_tensor *a = tu_from_f64(x, CT_SHAPE(n2), CT_I32, tu_device);
  TU_CHECK(a);
  ct_tensor *s = ct_sum(a);
  TU_CHECK(s);
  ref_assert_dtype(s, CT_I64, "sum of int32");
  int64_t want = 0;
  for (int64_t i = 0; i < n2; ++i) want += (int64_t)x[i];
  int64_t got;
  TU_OK(ct_copy_to_host(s, &got, sizeof got));
  if (got != want) fail_msg("sum of %lld int32: got %lld, expected %lld", (long long)n2, (long long)got, (long long)want);
  ct_free(s), ct_free(a);
  free(x);
}

// Sizes of 0: sum is 0, mean NaN; max over an empty dim is an error.
static void test_empty_reductions(void **state) {
  (void)state;
  ct_tensor *e = ct_empty(CT_SHAPE(3, 0), CT_F32, tu_device);
  TU_CHECK(e);
  ct_tensor *s = ct_sum(e), *m = ct_mean(e), *sd = ct_sum_dim(e, 1, false), *sd0 = ct_sum_dim(e, 0, false);
  TU_CHECK(s);
  TU_CHECK(m);
  TU_CHECK(sd);
  TU_CHECK(sd0);
  const double zero[3] = {0, 0, 0}, nan = NAN;
  tu_assert_close(s, zero, 0, 0, "sum of an empty tensor");
  tu_assert_close(m, &nan, 0, 0, "mean of an empty tensor");
  ref_assert_shape(sd, CT_SHAPE(3), "sum over an empty dim");
  tu_assert_close(sd, zero, 0, 0, "sum over an empty dim");
  ref_assert_shape(sd0, CT_SHAPE(0), "sum of (3, 0) over dim 0");
  ct_clear_error();
  assert_null(ct_max(e));
  assert_true(ct_last_status() != CT_OK);
  assert_non_null(strstr(ct_last_error(), "ct_max"));
  ct_clear_error();
  assert_null(ct_max_dim(e, 1, false, NULL));
  assert_non_null(strstr(ct_last_error(), "ct_max_dim"));
  assert_null(ct_argmax_dim(e, -1, false));
  assert_non_null(strstr(ct_last_error(), "ct_argmax_dim"));
  ct_free(s), ct_free(m), ct_free(sd), ct_free(sd0), ct_free(e);
}

// Result dtypes spelled out (torch): sum of bool/uint8/int32 -> int64,
// float16 stays float16, argmax -> int64, max keeps the dtype.
static void test_result_dtypes(void **state) {
  (void)state;
  const double ones[4] = {1, 1, 1, 1};
  ct_tensor *b = tu_from_f64(ones, CT_SHAPE(4), CT_BOOL, tu_device);
  TU_CHECK(b);
  ct_tensor *s = ct_sum(b), *mx = ct_max(b);
  TU_CHECK(s);
  TU_CHECK(mx);
  ref_assert_dtype(s, CT_I64, "sum(bool)");
  ref_assert_dtype(mx, CT_BOOL, "max(bool)");
  const double four = 4, one = 1;
  tu_assert_close(s, &four, 0, 0, "sum(bool) counts");
  tu_assert_close(mx, &one, 0, 0, "max(bool)");
  ct_free(s), ct_free(mx), ct_free(b);
  ct_tensor *h = ct_full(CT_SHAPE(2, 3), 0.5, CT_F16, tu_device);
  TU_CHECK(h);
  s = ct_sum_dim(h, 1, false);
  ct_tensor *m = ct_mean(h);
  TU_CHECK(s);
  TU_CHECK(m);
  ref_assert_dtype(s, CT_F16, "sum(float16)");
  ref_assert_dtype(m, CT_F16, "mean(float16)");
  const double r[2] = {1.5, 1.5}, half = 0.5;
  tu_assert_close(s, r, 0, 0, "sum(float16) dim 1");
  tu_assert_close(m, &half, 0, 0, "mean(float16)");
  ct_free(s), ct_free(m), ct_free(h);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_all_dims),
      cmocka_unit_test(test_reduce_shapes),
      cmocka_unit_test(test_reduce_noncontiguous),
      cmocka_unit_test(test_ties),
      cmocka_unit_test(test_nan),
      cmocka_unit_test(test_large_sum),
      cmocka_unit_test(test_empty_reductions),
      cmocka_unit_test(test_result_dtypes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
