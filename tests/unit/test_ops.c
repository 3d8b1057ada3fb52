// SPDX-License-Identifier: MIT
//
// test_ops: elementwise ops on the device under test -- binary ops with
// broadcasting, scalars and dtype promotion, comparisons, unary math with its
// domains, isfinite / any_nonfinite, and the _out variants.
//
// Invariant checked: every element of every result equals the float64
// reference computed here from the same (already dtype-rounded) inputs,
// within the tolerance of the result's dtype; integer and bool results match
// exactly; result dtypes follow torch's promotion rules (tu_ref.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

static const ct_dtype all_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16, CT_I32, CT_I64, CT_U8, CT_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))
static const ct_dtype float_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16};

static double rtol_of(ct_dtype dt) { return tu_rtol(dt); }
static double atol_of(ct_dtype dt) { return tu_atol(dt); }

// Input range for op on dtype dt: keeps integer results in range (no
// overflow except u8 subtraction, which wraps as in torch) and pow's base
// positive.
static void op_range(ct_binary_op op, ct_dtype dt, int operand, double *lo, double *hi) {
  if (op == CT_OP_POW) {
    if (ref_is_float(dt)) *lo = operand ? -2.0 : 0.1, *hi = operand ? 2.5 : 4.0;
    else *lo = 0, *hi = operand ? 4 : 6; // 5^3 = 125 fits every integer dtype
    return;
  }
  if (op == CT_OP_DIV && operand == 1 && ref_is_float(dt)) {
    *lo = 0.5, *hi = 8; // away from 0; division by zero is tested apart
    return;
  }
  switch (dt) {
  case CT_U8: *lo = 0, *hi = op == CT_OP_MUL ? 16 : 128; break;
  case CT_I32: case CT_I64: *lo = -1000, *hi = 1000; break;
  case CT_F16: case CT_BF16: *lo = -30, *hi = 30; break;
  default: *lo = -100, *hi = 100; break;
  }
  if (op == CT_OP_DIV && operand == 1 && !ref_is_float(dt)) *lo = 1; // integer divisors >= 1
}

// Narrows [lo, hi) to what dtype dt holds (uint8 is 0..255).
static void clamp_range(ct_dtype dt, double *lo, double *hi) {
  if (dt == CT_U8) {
    if (*lo < 0) *lo = 0;
    if (*hi > 128) *hi = 128;
  }
}

// a op b on the device under test against the reference, for tensors of
// shapes sa and sb (broadcast), dtypes da and db.
static void check_binary(ct_binary_op op, ct_shape sa, ct_dtype da, ct_shape sb, ct_dtype db) {
  ct_shape so;
  assert_true(ref_broadcast(sa, sb, &so));
  double la, ha, lb, hb;
  op_range(op, ref_promote(da, db), 0, &la, &ha);
  op_range(op, ref_promote(da, db), 1, &lb, &hb);
  clamp_range(da, &la, &ha);
  clamp_range(db, &lb, &hb);
  double *x, *y;
  ct_tensor *a = ref_tensor(sa, da, tu_device, la, ha, &x);
  ct_tensor *b = ref_tensor(sb, db, tu_device, lb, hb, &y);
  // Plant equal pairs so that eq/le/ge see true as well as false.
  int64_t na = ct_shape_numel(sa), nb = ct_shape_numel(sb);
  if (ref_is_comparison(op) && na == nb && da == db) {
    for (int64_t i = 0; i < na; i += 3) y[i] = x[i];
    ct_free(b);
    b = tu_from_f64(y, sb, db, tu_device);
    TU_CHECK(b);
  }
  ct_tensor *c = ct_binary(op, a, b);
  char what[160], s1[64], s2[64];
  snprintf(what, sizeof what, "%s(%s %s, %s %s)", ct_binary_op_name(op), ct_shape_str(sa, s1, 64),
           ct_dtype_name(da), ct_shape_str(sb, s2, 64), ct_dtype_name(db));
  TU_CHECK(c);
  ct_dtype rd = ref_binary_result(op, da, db);
  ref_assert_shape(c, so, what);
  ref_assert_dtype(c, rd, what);
  assert_true(ct_device_eq(ct_device_of(c), tu_device));
  int64_t n = ct_shape_numel(so);
  double *ref = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i)
    ref[i] = ref_cast(ref_binary_value(op, x[ref_bcast_index(i, so, sa)], y[ref_bcast_index(i, so, sb)]), rd);
  // Results in a narrow float dtype are one rounding of the float32 result.
  double rt = rtol_of(rd), at = atol_of(rd);
  if (op == CT_OP_POW && ref_is_float(rd)) rt *= 4; // pow is a few ulps
  tu_assert_close(c, ref, rt, at, what);
  free(ref);
  free(x);
  free(y);
  ct_free(a);
  ct_free(b);
  ct_free(c);
}

static const ct_binary_op arith_ops[] = {CT_OP_ADD, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV,
                                         CT_OP_MAXIMUM, CT_OP_MINIMUM, CT_OP_POW};
static const ct_binary_op cmp_ops[] = {CT_OP_EQ, CT_OP_NE, CT_OP_LT, CT_OP_LE, CT_OP_GT, CT_OP_GE};

// Every arithmetic op, every dtype, with the broadcasting shapes of the issue.
static void test_binary_broadcast(void **state) {
  (void)state;
  const ct_shape shapes[][2] = {
      {CT_SHAPE(3, 1), CT_SHAPE(1, 4)}, {CT_SHAPE(2, 3, 4), CT_SHAPE(4)},
      {CT_SCALAR_SHAPE, CT_SHAPE(5)},   {CT_SHAPE(4, 1, 3), CT_SHAPE(2, 1)},
      {CT_SHAPE(37), CT_SHAPE(37)},     {CT_SHAPE(2, 1, 3, 1), CT_SHAPE(5, 1, 2)},
  };
  for (size_t o = 0; o < sizeof arith_ops / sizeof arith_ops[0]; ++o)
    for (int k = 0; k < NDT; ++k) {
      ct_dtype dt = all_dtypes[k];
      if (dt == CT_BOOL && arith_ops[o] == CT_OP_SUB) continue; // an error in torch (test_errors)
      if (dt == CT_BOOL && (arith_ops[o] == CT_OP_DIV || arith_ops[o] == CT_OP_POW)) continue;
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        check_binary(arith_ops[o], shapes[s][0], dt, shapes[s][1], dt);
        check_binary(arith_ops[o], shapes[s][1], dt, shapes[s][0], dt);
      }
    }
}

static void test_binary_large(void **state) {
  (void)state;
  // Large enough for the CPU backend's threads (and many GPU blocks).
  check_binary(CT_OP_ADD, CT_SHAPE(300, 257), CT_F32, CT_SHAPE(257), CT_F32);
  check_binary(CT_OP_MUL, CT_SHAPE(70000), CT_F16, CT_SHAPE(70000), CT_F16);
  check_binary(CT_OP_MAXIMUM, CT_SHAPE(513, 129), CT_I64, CT_SHAPE(513, 1), CT_I64);
  check_binary(CT_OP_LT, CT_SHAPE(100, 1000), CT_BF16, CT_SHAPE(100, 1000), CT_BF16);
}

static void test_comparisons(void **state) {
  (void)state;
  for (size_t o = 0; o < sizeof cmp_ops / sizeof cmp_ops[0]; ++o)
    for (int k = 0; k < NDT; ++k) {
      check_binary(cmp_ops[o], CT_SHAPE(6, 7), all_dtypes[k], CT_SHAPE(6, 7), all_dtypes[k]);
      check_binary(cmp_ops[o], CT_SHAPE(3, 1), all_dtypes[k], CT_SHAPE(1, 4), all_dtypes[k]);
    }
  // Mixed dtypes compare in the promoted dtype.
  check_binary(CT_OP_LT, CT_SHAPE(5, 4), CT_I32, CT_SHAPE(4), CT_F32);
  check_binary(CT_OP_GE, CT_SHAPE(5, 4), CT_F16, CT_SHAPE(5, 4), CT_F64);
  check_binary(CT_OP_EQ, CT_SHAPE(5, 4), CT_U8, CT_SHAPE(5, 4), CT_I64);
  // NaN compares false except with ne.
  const double xs[] = {NAN, 1.0, NAN}, ys[] = {NAN, NAN, 2.0};
  ct_tensor *a = tu_from_f64(xs, CT_SHAPE(3), CT_F32, tu_device);
  ct_tensor *b = tu_from_f64(ys, CT_SHAPE(3), CT_F32, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  for (size_t o = 0; o < sizeof cmp_ops / sizeof cmp_ops[0]; ++o) {
    ct_tensor *c = ct_binary(cmp_ops[o], a, b);
    TU_CHECK(c);
    double ref[3];
    for (int i = 0; i < 3; ++i) ref[i] = ref_binary_value(cmp_ops[o], xs[i], ys[i]);
    tu_assert_close(c, ref, 0, 0, "comparison with NaN");
    ct_free(c);
  }
  ct_free(a);
  ct_free(b);
}

static void test_mixed_dtypes(void **state) {
  (void)state;
  static const struct { ct_dtype a, b, want; } cases[] = {
      {CT_F32, CT_F64, CT_F64}, {CT_I32, CT_F32, CT_F32}, {CT_BOOL, CT_BOOL, CT_BOOL},
      {CT_BOOL, CT_I32, CT_I32}, {CT_U8, CT_I64, CT_I64},  {CT_F16, CT_BF16, CT_F32},
      {CT_F16, CT_F32, CT_F32},  {CT_I64, CT_BF16, CT_BF16}, {CT_U8, CT_I32, CT_I32},
      {CT_I32, CT_I64, CT_I64},  {CT_BOOL, CT_F16, CT_F16},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    assert_true(ref_promote(cases[c].a, cases[c].b) == cases[c].want);
    check_binary(CT_OP_ADD, CT_SHAPE(4, 5), cases[c].a, CT_SHAPE(5), cases[c].b);
    check_binary(CT_OP_MUL, CT_SHAPE(5), cases[c].b, CT_SHAPE(4, 5), cases[c].a);
    check_binary(CT_OP_MAXIMUM, CT_SHAPE(4, 5), cases[c].a, CT_SHAPE(4, 5), cases[c].b);
  }
  // bool + bool is logical or, bool * bool logical and (result bool).
  const double p[] = {0, 0, 1, 1}, q[] = {0, 1, 0, 1};
  ct_tensor *a = tu_from_f64(p, CT_SHAPE(4), CT_BOOL, tu_device);
  ct_tensor *b = tu_from_f64(q, CT_SHAPE(4), CT_BOOL, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  ct_tensor *s = ct_add(a, b), *m = ct_mul(a, b);
  TU_CHECK(s);
  TU_CHECK(m);
  ref_assert_dtype(s, CT_BOOL, "bool + bool");
  const double or_[] = {0, 1, 1, 1}, and_[] = {0, 0, 0, 1};
  tu_assert_close(s, or_, 0, 0, "bool + bool");
  tu_assert_close(m, and_, 0, 0, "bool * bool");
  ct_free(s);
  ct_free(m);
  ct_free(a);
  ct_free(b);
}

// Integer division is true division in float32 (torch.div), including /0.
static void test_integer_division(void **state) {
  (void)state;
  const ct_dtype ints[] = {CT_I32, CT_I64, CT_U8, CT_BOOL};
  for (int k = 0; k < 4; ++k) {
    check_binary(CT_OP_DIV, CT_SHAPE(7, 9), ints[k], CT_SHAPE(9), ints[k]);
  }
  const double xs[] = {7, -7, 1, 0, -3, 5}, ys[] = {2, 2, 3, 0, 0, -4};
  ct_tensor *a = tu_from_f64(xs, CT_SHAPE(6), CT_I64, tu_device);
  ct_tensor *b = tu_from_f64(ys, CT_SHAPE(6), CT_I64, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  ct_tensor *c = ct_div(a, b);
  TU_CHECK(c);
  ref_assert_dtype(c, CT_F32, "int64 / int64");
  const double ref[] = {3.5, -3.5, (double)(1.0f / 3.0f), NAN, -INFINITY, -1.25};
  tu_assert_close(c, ref, 0, 0, "int64 / int64 (true division)");
  ct_free(c);
  // Floats: x / 0 is +-inf, 0 / 0 NaN.
  ct_tensor *fa = tu_from_f64(xs, CT_SHAPE(6), CT_F64, tu_device);
  ct_tensor *fb = tu_from_f64(ys, CT_SHAPE(6), CT_F64, tu_device);
  TU_CHECK(fa);
  TU_CHECK(fb);
  c = ct_div(fa, fb);
  TU_CHECK(c);
  const double reff[] = {3.5, -3.5, 1.0 / 3.0, NAN, -INFINITY, -1.25};
  tu_assert_close(c, reff, 1e-15, 0, "float64 division by zero");
  ct_free(c);
  ct_free(fa);
  ct_free(fb);
  ct_free(a);
  ct_free(b);
}

// Non-contiguous operands: a transposed view and a narrowed one.
static void test_binary_noncontiguous(void **state) {
  (void)state;
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double *x, *y, lo, hi;
    op_range(CT_OP_ADD, dt, 0, &lo, &hi);
    ct_tensor *base_a = ref_tensor(CT_SHAPE(4, 3), dt, tu_device, lo, hi, &x);
    ct_tensor *base_b = ref_tensor(CT_SHAPE(3, 7), dt, tu_device, lo, hi, &y);
    ct_tensor *a = ct_t(base_a);          // (3, 4), strides (1, 3)
    ct_tensor *b = ct_narrow(base_b, 1, 2, 4); // (3, 4), strides (7, 1), offset 2
    TU_CHECK(a);
    TU_CHECK(b);
    const ct_binary_op ops[] = {CT_OP_ADD, CT_OP_MUL, CT_OP_MAXIMUM, CT_OP_GT};
    for (int o = 0; o < 4; ++o) {
      if (dt == CT_BOOL && ops[o] == CT_OP_GT) continue;
      ct_tensor *c = ct_binary(ops[o], a, b);
      TU_CHECK(c);
      ct_dtype rd = ref_binary_result(ops[o], dt, dt);
      double ref[12];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j)
          ref[i * 4 + j] = ref_cast(ref_binary_value(ops[o], x[j * 3 + i], y[i * 7 + 2 + j]), rd);
      char what[96];
      snprintf(what, sizeof what, "%s of a transposed and a narrowed %s", ct_binary_op_name(ops[o]),
               ct_dtype_name(dt));
      ref_assert_shape(c, CT_SHAPE(3, 4), what);
      tu_assert_close(c, ref, rtol_of(rd), atol_of(rd), what);
      ct_free(c);
    }
    // A broadcast (expanded, stride 0) operand against a transposed one.
    ct_tensor *row = ct_select(base_b, 0, 1); // (7,)
    ct_tensor *r4 = ct_narrow(row, 0, 0, 4);  // (4,)
    TU_CHECK(r4);
    ct_tensor *c = ct_binary(CT_OP_ADD, a, r4);
    TU_CHECK(c);
    double ref[12];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) ref[i * 4 + j] = ref_cast(x[j * 3 + i] + y[7 + j], dt);
    tu_assert_close(c, ref, rtol_of(dt), atol_of(dt), "transposed + narrowed row");
    ct_free(c);
    ct_free(r4);
    ct_free(row);
    ct_free(a);
    ct_free(b);
    ct_free(base_a);
    ct_free(base_b);
    free(x);
    free(y);
  }
}

// a op python-number: the number does not widen the dtype except as noted.
static void test_scalar_ops(void **state) {
  (void)state;
  const double scalars[] = {2.5, -3.0, 3.0, 0.5};
  const ct_binary_op ops[] = {CT_OP_ADD, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV, CT_OP_POW,
                              CT_OP_MAXIMUM, CT_OP_MINIMUM, CT_OP_LT, CT_OP_EQ, CT_OP_GE};
  for (int k = 0; k < NDT; ++k)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o)
      for (int si = 0; si < 4; ++si) {
        ct_dtype dt = all_dtypes[k];
        ct_binary_op op = ops[o];
        double s = scalars[si];
        if (dt == CT_BOOL && (op == CT_OP_SUB || op == CT_OP_POW)) continue;
        if (op == CT_OP_POW && s < 0) continue; // integer ** negative is an error in torch
        // A negative integer is not a uint8: torch converts it with wrap-around
        // (even for comparisons), which this runtime does not promise.
        if (dt == CT_U8 && s < 0 && op != CT_OP_DIV) continue;
        double lo, hi, *x;
        op_range(op, dt, 0, &lo, &hi);
        ct_tensor *a = ref_tensor(CT_SHAPE(5, 6), dt, tu_device, lo, hi, &x);
        if (op == CT_OP_EQ || op == CT_OP_GE) x[0] = ref_cast(s, dt); // plant equality
        ct_free(a);
        a = tu_from_f64(x, CT_SHAPE(5, 6), dt, tu_device);
        TU_CHECK(a);
        ct_tensor *c;
        switch (op) {
        case CT_OP_ADD: c = ct_add_scalar(a, s); break;
        case CT_OP_SUB: c = ct_sub_scalar(a, s); break;
        case CT_OP_MUL: c = ct_mul_scalar(a, s); break;
        case CT_OP_DIV: c = ct_div_scalar(a, s); break;
        case CT_OP_POW: c = ct_pow_scalar(a, s); break;
        default: c = ct_binary_scalar(op, a, s); break;
        }
        char what[96];
        snprintf(what, sizeof what, "%s(%s, %g)", ct_binary_op_name(op), ct_dtype_name(dt), s);
        TU_CHECK(c);
        ct_dtype rd = ref_scalar_result(op, dt, s);
        ref_assert_dtype(c, rd, what);
        ref_assert_shape(c, CT_SHAPE(5, 6), what);
        double ref[30];
        for (int i = 0; i < 30; ++i) ref[i] = ref_cast(ref_binary_value(op, x[i], s), rd);
        double rt = rtol_of(rd) * (op == CT_OP_POW ? 4 : 1);
        tu_assert_close(c, ref, rt, atol_of(rd), what);
        ct_free(c);
        ct_free(a);
        free(x);
      }
  // The dtype rules spelled out: int64 + 2.5 -> float32, int32 + 3 -> int32,
  // bool + 1 -> int64, float16 * 1e3 stays float16.
  ct_tensor *i64 = ct_ones(CT_SHAPE(2), CT_I64, tu_device);
  ct_tensor *i32 = ct_ones(CT_SHAPE(2), CT_I32, tu_device);
  ct_tensor *bl = ct_ones(CT_SHAPE(2), CT_BOOL, tu_device);
  ct_tensor *h = ct_ones(CT_SHAPE(2), CT_F16, tu_device);
  ct_tensor *r1 = ct_add_scalar(i64, 2.5), *r2 = ct_add_scalar(i32, 3), *r3 = ct_add_scalar(bl, 1),
            *r4 = ct_mul_scalar(h, 1e3);
  TU_CHECK(r1);
  TU_CHECK(r2);
  TU_CHECK(r3);
  TU_CHECK(r4);
  ref_assert_dtype(r1, CT_F32, "int64 + 2.5");
  ref_assert_dtype(r2, CT_I32, "int32 + 3");
  ref_assert_dtype(r3, CT_I64, "bool + 1");
  ref_assert_dtype(r4, CT_F16, "float16 * 1e3");
  const double v1[] = {3.5, 3.5}, v2[] = {4, 4}, v3[] = {2, 2}, v4[] = {1000, 1000};
  tu_assert_close(r1, v1, 0, 0, "int64 + 2.5");
  tu_assert_close(r2, v2, 0, 0, "int32 + 3");
  tu_assert_close(r3, v3, 0, 0, "bool + 1");
  tu_assert_close(r4, v4, 0, 0, "float16 * 1e3");
  ct_free(r1), ct_free(r2), ct_free(r3), ct_free(r4);
  ct_free(i64), ct_free(i32), ct_free(bl), ct_free(h);
}

// pow's domain: a negative base with a fractional exponent is NaN; 0^0 = 1.
static void test_pow_domain(void **state) {
  (void)state;
  const double xs[] = {-2, -2, 0, 0, 4, -8, INFINITY, NAN}, ys[] = {0.5, 2, 0, -1, -0.5, 1.0 / 3, -1, 0};
  for (int k = 0; k < 2; ++k) {
    ct_dtype dt = k ? CT_F64 : CT_F32;
    ct_tensor *a = tu_from_f64(xs, CT_SHAPE(8), dt, tu_device), *b = tu_from_f64(ys, CT_SHAPE(8), dt, tu_device);
    TU_CHECK(a);
    TU_CHECK(b);
    ct_tensor *c = ct_pow(a, b);
    double ref[8];
    for (int i = 0; i < 8; ++i) ref[i] = ref_cast(pow(ref_cast(xs[i], dt), ref_cast(ys[i], dt)), dt);
    tu_assert_close(c, ref, rtol_of(dt), 0, "pow domain");
    ct_free(c);
    ct_free(a);
    ct_free(b);
  }
}

// maximum/minimum propagate NaN (torch.maximum), unlike fmax.
static void test_max_min_nan(void **state) {
  (void)state;
  const double xs[] = {NAN, 1, NAN, -INFINITY, 3}, ys[] = {1, NAN, NAN, 2, INFINITY};
  for (size_t k = 0; k < 4; ++k) {
    ct_dtype dt = float_dtypes[k];
    ct_tensor *a = tu_from_f64(xs, CT_SHAPE(5), dt, tu_device), *b = tu_from_f64(ys, CT_SHAPE(5), dt, tu_device);
    TU_CHECK(a);
    TU_CHECK(b);
    ct_tensor *mx = ct_maximum(a, b), *mn = ct_minimum(a, b);
    TU_CHECK(mx);
    TU_CHECK(mn);
    const double rmx[] = {NAN, NAN, NAN, 2, INFINITY}, rmn[] = {NAN, NAN, NAN, -INFINITY, 3};
    tu_assert_close(mx, rmx, 0, 0, "maximum with NaN");
    tu_assert_close(mn, rmn, 0, 0, "minimum with NaN");
    ct_free(mx), ct_free(mn), ct_free(a), ct_free(b);
  }
}

// ---- unary ---------------------------------------------------------------------------------
static void unary_range(ct_unary_op op, ct_dtype dt, double *lo, double *hi) {
  switch (op) {
  case CT_OP_EXP: *lo = -8, *hi = 8; break;
  case CT_OP_LOG: *lo = ref_is_float(dt) ? 0.01 : 1, *hi = 100; break;
  case CT_OP_SQRT: *lo = 0, *hi = 100; break;
  case CT_OP_SIGMOID: *lo = -12, *hi = 12; break;
  case CT_OP_TANH: *lo = -5, *hi = 5; break;
  default: *lo = dt == CT_U8 ? 0 : -50, *hi = 50; break;
  }
  if (!ref_is_float(dt) && (op == CT_OP_EXP)) *lo = -5, *hi = 5;
}

static void check_unary(ct_unary_op op, ct_dtype dt, ct_shape s) {
  double lo, hi, *x;
  unary_range(op, dt, &lo, &hi);
  clamp_range(dt, &lo, &hi);
  ct_tensor *a = ref_tensor(s, dt, tu_device, lo, hi, &x);
  ct_tensor *c = ct_unary(op, a);
  char what[96];
  snprintf(what, sizeof what, "%s(%s)", ct_unary_op_name(op), ct_dtype_name(dt));
  TU_CHECK(c);
  // torch: exp/log/sqrt/sigmoid/tanh of an integer tensor give float32;
  // isfinite gives bool; the rest keep the dtype.
  bool needs_float = op == CT_OP_EXP || op == CT_OP_LOG || op == CT_OP_SQRT ||
                     op == CT_OP_SIGMOID || op == CT_OP_TANH;
  ct_dtype rd = op == CT_OP_ISFINITE ? CT_BOOL : needs_float && !ref_is_float(dt) ? CT_F32 : dt;
  ref_assert_dtype(c, rd, what);
  ref_assert_shape(c, s, what);
  int64_t n = ct_shape_numel(s);
  double *ref = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = ref_cast(ref_unary_value(op, x[i]), rd);
  tu_assert_close(c, ref, rtol_of(rd), atol_of(rd), what);
  free(ref);
  free(x);
  ct_free(a);
  ct_free(c);
}

static void test_unary(void **state) {
  (void)state;
  for (int op = 0; op < CT_NUM_UNARY_OPS; ++op)
    for (int k = 0; k < NDT; ++k) {
      ct_dtype dt = all_dtypes[k];
      if (dt == CT_BOOL && (op == CT_OP_NEG || op == CT_OP_ABS || op == CT_OP_RELU)) continue;
      if (dt == CT_U8 && op == CT_OP_NEG) continue; // wraps in torch; checked below
      check_unary((ct_unary_op)op, dt, CT_SHAPE(9, 11));
    }
  check_unary(CT_OP_EXP, CT_F32, CT_SHAPE(200, 300)); // threaded / many blocks
  check_unary(CT_OP_TANH, CT_BF16, CT_SHAPE(70001));
  check_unary(CT_OP_SIGMOID, CT_F16, CT_SCALAR_SHAPE);
  // uint8 negation wraps modulo 256, as in torch.
  const double xs[] = {0, 1, 5, 255};
  ct_tensor *a = tu_from_f64(xs, CT_SHAPE(4), CT_U8, tu_device);
  TU_CHECK(a);
  ct_tensor *c = ct_neg(a);
  TU_CHECK(c);
  const double ref[] = {0, 255, 251, 1};
  tu_assert_close(c, ref, 0, 0, "neg(uint8)");
  ct_free(c);
  ct_free(a);
}

// Special values: the domain edges of each function.
static void test_unary_special(void **state) {
  (void)state;
  const double xs[] = {-1, 0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 100, -100, 1e10};
  const int n = (int)(sizeof xs / sizeof xs[0]);
  for (int k = 0; k < 4; ++k) {
    ct_dtype dt = float_dtypes[k];
    ct_tensor *a = tu_from_f64(xs, CT_SHAPE(n), dt, tu_device);
    TU_CHECK(a);
    double xr[16];
    // As stored by tu_from_f64: f16/bf16 through float first; 1e10 is inf in f16.
    for (int i = 0; i < n; ++i) xr[i] = ref_cast(dt == CT_F64 ? xs[i] : (double)(float)xs[i], dt);
    for (int op = 0; op < CT_NUM_UNARY_OPS; ++op) {
      ct_tensor *c = ct_unary((ct_unary_op)op, a);
      TU_CHECK(c);
      ct_dtype rd = op == CT_OP_ISFINITE ? CT_BOOL : dt;
      double ref[16];
      for (int i = 0; i < n; ++i) ref[i] = ref_cast(ref_unary_value((ct_unary_op)op, xr[i]), rd);
      char what[96];
      snprintf(what, sizeof what, "%s(%s) at special values", ct_unary_op_name((ct_unary_op)op),
               ct_dtype_name(dt));
      tu_assert_close(c, ref, rtol_of(rd), atol_of(rd), what);
      ct_free(c);
    }
    // Spelled out: log(-1) and sqrt(-1) are NaN, log(0) is -inf.
    ct_tensor *lg = ct_log(a), *sq = ct_sqrt(a);
    double *l = tu_to_f64(lg), *q = tu_to_f64(sq);
    assert_non_null(l);
    assert_non_null(q);
    assert_true(isnan(l[0]) && isnan(q[0]));
    assert_true(isinf(l[1]) && l[1] < 0);
    assert_true(q[1] == 0.0);
    free(l), free(q), ct_free(lg), ct_free(sq), ct_free(a);
  }
}

// ---- isfinite / any_nonfinite ------------------------------------------------------------------
static void test_isfinite_any_nonfinite(void **state) {
  (void)state;
  const int64_t n = 40000;
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double *x = ref_alloc(n), *ref = ref_alloc(n), pos[3];
    ref_random(x, n, dt, 0, 100);
    bool fl = ref_is_float(dt);
    ct_tensor *a = tu_from_f64(x, CT_SHAPE(n), dt, tu_device);
    TU_CHECK(a);
    bool any = true;
    TU_OK(ct_any_nonfinite(a, &any));
    assert_false(any);
    ct_free(a);
    if (!fl) {
      // Integers are always finite.
      a = tu_from_f64(x, CT_SHAPE(n), dt, tu_device);
      ct_tensor *c = ct_isfinite(a);
      TU_CHECK(c);
      ref_assert_dtype(c, CT_BOOL, "isfinite(int)");
      for (int64_t i = 0; i < n; ++i) ref[i] = 1;
      tu_assert_close(c, ref, 0, 0, "isfinite of an integer tensor");
      ct_free(c);
      ct_free(a);
      free(x), free(ref);
      continue;
    }
    const double specials[3] = {INFINITY, -INFINITY, NAN};
    tu_fill_uniform(pos, 3, 0, (double)n);
    for (int s = 0; s < 3; ++s) {
      // One special value alone, at a random place, then at the very end.
      for (int where = 0; where < 2; ++where) {
        int64_t p = where ? n - 1 : (int64_t)pos[s];
        double keep = x[p];
        x[p] = specials[s];
        a = tu_from_f64(x, CT_SHAPE(n), dt, tu_device);
        TU_CHECK(a);
        any = false;
        TU_OK(ct_any_nonfinite(a, &any));
        if (!any) fail_msg("any_nonfinite missed %g at %lld of %lld (%s)", specials[s], (long long)p,
                           (long long)n, ct_dtype_name(dt));
        ct_tensor *c = ct_isfinite(a);
        TU_CHECK(c);
        for (int64_t i = 0; i < n; ++i) ref[i] = i == p ? 0 : 1;
        tu_assert_close(c, ref, 0, 0, "isfinite with a planted value");
        ct_free(c);
        ct_free(a);
        x[p] = keep;
      }
    }
    // A view that leaves the NaN out sees none; one that includes it does.
    x[10] = NAN;
    a = tu_from_f64(x, CT_SHAPE(200, 200), dt, tu_device);
    TU_CHECK(a);
    ct_tensor *v = ct_narrow(a, 1, 11, 100); // columns 11.. of every row: (0, 10) is out
    TU_CHECK(v);
    TU_OK(ct_any_nonfinite(v, &any));
    assert_false(any);
    ct_tensor *vt = ct_t(a); // all of it, transposed
    TU_CHECK(vt);
    TU_OK(ct_any_nonfinite(vt, &any));
    assert_true(any);
    ct_free(vt), ct_free(v), ct_free(a);
    free(x), free(ref);
  }
}

// ---- the device-side flag: ct_amp_non_finite_check_ ---------------------------------------------
static double found_value(const ct_tensor *found) {
  double v = -1;
  TU_OK(ct_item(found, &v)); // the one host wait, after the checks are queued
  return v;
}

// found_inf goes to 1 when a checked tensor holds inf or NaN (planted here,
// so the expected flag is known), is never cleared by a later clean tensor,
// and ignores what a view leaves out; integers are always finite.
static void test_amp_non_finite_check(void **state) {
  (void)state;
  const int64_t n = 40000;
  const double specials[3] = {INFINITY, -INFINITY, NAN};
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double *x = ref_alloc(n);
    ref_random(x, n, dt, 0, 100);
    ct_tensor *found = ct_zeros(CT_SCALAR_SHAPE, CT_F32, tu_device);
    TU_CHECK(found);
    ct_tensor *clean = tu_from_f64(x, CT_SHAPE(n), dt, tu_device);
    TU_CHECK(clean);
    TU_OK(ct_amp_non_finite_check_(clean, found));
    assert_true(found_value(found) == 0.0);
    if (ref_is_float(dt)) {
      for (int s = 0; s < 3; ++s) {
        TU_OK(ct_zero_(found));
        double keep = x[n - 7];
        x[n - 7] = specials[s];
        ct_tensor *bad = tu_from_f64(x, CT_SHAPE(200, 200), dt, tu_device);
        x[n - 7] = keep;
        TU_CHECK(bad);
        ct_tensor *left = ct_narrow(bad, 0, 0, 199); // rows 0..198: (199, 193) is out
        TU_CHECK(left);
        TU_OK(ct_amp_non_finite_check_(left, found));
        assert_true(found_value(found) == 0.0);
        ct_tensor *bt = ct_t(bad); // all of it, not contiguous
        TU_CHECK(bt);
        TU_OK(ct_amp_non_finite_check_(bt, found));
        TU_OK(ct_amp_non_finite_check_(clean, found)); // does not clear it
        if (found_value(found) != 1.0)
          fail_msg("found_inf missed %g (%s)", specials[s], ct_dtype_name(dt));
        ct_free(bt), ct_free(left), ct_free(bad);
      }
    } else {
      assert_true(found_value(found) == 0.0); // integers: nothing to find
    }
    ct_free(clean), ct_free(found);
    free(x);
  }
  // found_inf must be one f32 element on the tensor's device.
  ct_tensor *t = ct_zeros(CT_SHAPE(3), CT_F32, tu_device);
  ct_tensor *f64 = ct_zeros(CT_SCALAR_SHAPE, CT_F64, tu_device);
  ct_tensor *two = ct_zeros(CT_SHAPE(2), CT_F32, tu_device);
  TU_CHECK(t);
  TU_CHECK(f64);
  TU_CHECK(two);
  assert_int_equal(ct_amp_non_finite_check_(t, f64), CT_ERR_DTYPE);
  assert_non_null(strstr(ct_last_error(), "found_inf must be a float tensor"));
  assert_int_equal(ct_amp_non_finite_check_(t, two), CT_ERR_SHAPE);
  assert_non_null(strstr(ct_last_error(), "found_inf must be a one-element tensor"));
  assert_int_equal(ct_amp_non_finite_check_(NULL, two), CT_ERR_VALUE);
  ct_free(t), ct_free(f64), ct_free(two);
  ct_clear_error();
}

// ---- _out variants -----------------------------------------------------------------------------
static void test_out_variants(void **state) {
  (void)state;
  for (int k = 0; k < 4; ++k) {
    ct_dtype dt = float_dtypes[k];
    double *x, *y;
    ct_tensor *a = ref_tensor(CT_SHAPE(3, 4), dt, tu_device, -5, 5, &x);
    ct_tensor *b = ref_tensor(CT_SHAPE(4), dt, tu_device, 1, 3, &y);
    double ref[12];
    // Into a fresh (poisoned) output.
    ct_tensor *out = ct_empty(CT_SHAPE(3, 4), dt, tu_device);
    TU_CHECK(out);
    TU_OK(ct_binary_out(CT_OP_SUB, out, a, b));
    for (int i = 0; i < 12; ++i) ref[i] = ref_cast(x[i] - y[i % 4], dt);
    tu_assert_close(out, ref, rtol_of(dt), atol_of(dt), "binary_out sub");
    // Into a transposed view of a (4, 3) buffer.
    ct_tensor *buf = ct_empty(CT_SHAPE(4, 3), dt, tu_device);
    TU_CHECK(buf);
    ct_tensor *bt = ct_t(buf);
    TU_CHECK(bt);
    TU_OK(ct_binary_out(CT_OP_MUL, bt, a, b));
    double reft[12];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) reft[j * 3 + i] = ref_cast(x[i * 4 + j] * y[j], dt);
    tu_assert_close(buf, reft, rtol_of(dt), atol_of(dt), "binary_out into a transposed view");
    // out aliases a: a := a / b, b broadcast. Each in-place step below is
    // checked against the reference computed from the values a held before.
    TU_OK(ct_binary_out(CT_OP_DIV, a, a, b));
    for (int i = 0; i < 12; ++i) ref[i] = ref_cast(x[i] / y[i % 4], dt);
    tu_assert_close(a, ref, rtol_of(dt), atol_of(dt), "binary_out aliasing a");
    double *cur = tu_to_f64(a);
    assert_non_null(cur);
    // out aliases both: a := a * a.
    TU_OK(ct_binary_out(CT_OP_MUL, a, a, a));
    for (int i = 0; i < 12; ++i) ref[i] = ref_cast(cur[i] * cur[i], dt);
    tu_assert_close(a, ref, rtol_of(dt), atol_of(dt), "binary_out a := a * a");
    free(cur);
    cur = tu_to_f64(a);
    assert_non_null(cur);
    // Scalar and unary, in place.
    TU_OK(ct_binary_scalar_out(CT_OP_ADD, a, a, -1.5));
    for (int i = 0; i < 12; ++i) ref[i] = ref_cast(cur[i] - 1.5, dt);
    tu_assert_close(a, ref, rtol_of(dt), atol_of(dt), "binary_scalar_out in place");
    free(cur);
    cur = tu_to_f64(a);
    assert_non_null(cur);
    TU_OK(ct_unary_out(CT_OP_TANH, a, a));
    for (int i = 0; i < 12; ++i) ref[i] = ref_cast(tanh(cur[i]), dt);
    tu_assert_close(a, ref, rtol_of(dt), atol_of(dt), "unary_out tanh in place");
    free(cur);
    // A comparison into a bool output (against out's actual values).
    cur = tu_to_f64(out);
    assert_non_null(cur);
    ct_tensor *mask = ct_empty(CT_SHAPE(3, 4), CT_BOOL, tu_device);
    TU_CHECK(mask);
    TU_OK(ct_binary_out(CT_OP_GT, mask, out, b));
    for (int i = 0; i < 12; ++i) ref[i] = cur[i] > y[i % 4];
    tu_assert_close(mask, ref, 0, 0, "binary_out gt into bool");
    free(cur);
    // Wrong output dtype or shape: errors, output untouched.
    ct_clear_error();
    assert_int_not_equal(ct_binary_out(CT_OP_ADD, mask, a, b), CT_OK);
    assert_int_equal(ct_last_status(), CT_ERR_DTYPE);
    assert_int_not_equal(ct_binary_out(CT_OP_ADD, buf, a, b), CT_OK);
    assert_int_equal(ct_last_status(), CT_ERR_SHAPE);
    assert_int_not_equal(ct_unary_out(CT_OP_EXP, mask, out), CT_OK);
    tu_assert_close(mask, ref, 0, 0, "output after a rejected call");
    ct_free(mask), ct_free(bt), ct_free(buf), ct_free(out), ct_free(a), ct_free(b);
    free(x), free(y);
  }
  // Integer out with an integer op; true division needs a float output.
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(10), CT_I32, tu_device, -100, 100, &x);
  ct_tensor *o = ct_empty(CT_SHAPE(10), CT_F32, tu_device);
  TU_CHECK(o);
  TU_OK(ct_binary_out(CT_OP_DIV, o, a, a));
  double ref[10];
  for (int i = 0; i < 10; ++i) ref[i] = x[i] == 0 ? NAN : 1.0;
  tu_assert_close(o, ref, 0, 0, "int32 / int32 into float32");
  TU_OK(ct_binary_out(CT_OP_ADD, a, a, a));
  for (int i = 0; i < 10; ++i) ref[i] = 2 * x[i];
  tu_assert_close(a, ref, 0, 0, "int32 a := a + a");
  ct_free(o), ct_free(a);
  free(x);
}

// ---- integer wrap-around (torch's integer arithmetic is modulo 2^bits) ----------------------
static void check_u8(const char *what, ct_tensor *c, const double *want, int n) {
  TU_CHECK(c);
  ref_assert_dtype(c, CT_U8, what);
  ref_assert_shape(c, CT_SHAPE(n), what);
  tu_assert_close(c, want, 0, 0, what);
  ct_free(c);
}

// uint8 tensors: results wrap modulo 256 (values from torch 2.x).
static void test_uint8_wraparound(void **state) {
  (void)state;
  const double xa[] = {200, 8, 3}, xb[] = {100, 3, 5};
  ct_tensor *a = tu_from_f64(xa, CT_SHAPE(3), CT_U8, tu_device);
  ct_tensor *b = tu_from_f64(xb, CT_SHAPE(3), CT_U8, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  check_u8("u8 + u8", ct_add(a, b), (const double[]){44, 11, 8}, 3);
  check_u8("u8 - u8", ct_sub(b, a), (const double[]){156, 251, 2}, 3);
  check_u8("u8 * u8", ct_mul(a, b), (const double[]){32, 24, 15}, 3);
  check_u8("u8 - 5", ct_sub_scalar(a, 5), (const double[]){195, 3, 254}, 3);
  check_u8("-u8", ct_neg(a), (const double[]){56, 248, 253}, 3);
  ct_free(a);
  ct_free(b);
}

// A negative Python int with a uint8 tensor keeps uint8 and wraps:
// torch.tensor([200, 8, 3], dtype=torch.uint8) + (-3) is [197, 5, 0], and
// * (-1) is [56, 248, 253].
static void test_uint8_negative_scalar(void **state) {
  (void)state;
  const double xa[] = {200, 8, 3};
  ct_tensor *a = tu_from_f64(xa, CT_SHAPE(3), CT_U8, tu_device);
  TU_CHECK(a);
  check_u8("u8 + (-3)", ct_add_scalar(a, -3), (const double[]){197, 5, 0}, 3);
  check_u8("u8 * (-1)", ct_mul_scalar(a, -1), (const double[]){56, 248, 253}, 3);
  ct_free(a);
}

// Integer pow wraps like the other integer ops: torch gives
// uint8 [200, 8, 3] ** 3 = [0, 0, 27] and int32 100000 ** 3 = -1530494976.
static void test_integer_pow_overflow(void **state) {
  (void)state;
  const double xa[] = {200, 8, 3};
  ct_tensor *a = tu_from_f64(xa, CT_SHAPE(3), CT_U8, tu_device);
  TU_CHECK(a);
  check_u8("u8 ** 3", ct_pow_scalar(a, 3), (const double[]){0, 0, 27}, 3);
  ct_free(a);
  const double xb[] = {7, -3, 100000};
  ct_tensor *b = tu_from_f64(xb, CT_SHAPE(3), CT_I32, tu_device);
  TU_CHECK(b);
  ct_tensor *c = ct_pow_scalar(b, 3);
  TU_CHECK(c);
  ref_assert_dtype(c, CT_I32, "i32 ** 3");
  tu_assert_close(c, (const double[]){343, -27, -1530494976}, 0, 0, "i32 ** 3 (wraps)");
  ct_free(c);
  ct_free(b);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binary_broadcast),
      cmocka_unit_test(test_binary_large),
      cmocka_unit_test(test_comparisons),
      cmocka_unit_test(test_mixed_dtypes),
      cmocka_unit_test(test_integer_division),
      cmocka_unit_test(test_binary_noncontiguous),
      cmocka_unit_test(test_scalar_ops),
      cmocka_unit_test(test_pow_domain),
      cmocka_unit_test(test_max_min_nan),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_unary_special),
      cmocka_unit_test(test_isfinite_any_nonfinite),
      cmocka_unit_test(test_out_variants),
      cmocka_unit_test(test_uint8_wraparound),
      cmocka_unit_test(test_uint8_negative_scalar),
      cmocka_unit_test(test_integer_pow_overflow),
      cmocka_unit_test(test_amp_non_finite_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
