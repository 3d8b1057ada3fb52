// SPDX-License-Identifier: MIT
//
// test_vecmath: core/vecmath.h, the float exp, tanh, log and sigmoid the
// runtime's CPU ops and the JIT's kernels compute:
//  - each against the C library's double function over every 4099th float
//    (about a million arguments, subnormals and the limits included), in
//    ulps of the float result: exp and log within 1.5, tanh within 2.5,
//    sigmoid within 2.5;
//  - the special values the header states (+-0, +-inf, NaN, the overflow
//    and underflow edges, subnormal arguments and results);
//  - the runtime's exp, log, tanh and sigmoid of float32 (and of float16 and
//    bfloat16, computed in float) give these functions' bits on the CPU; on
//    a GPU, CUDA's own functions, within the float32 tolerance;
//  - the text the JIT pastes (cti_jit_vecmath_text) holds every region.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "jit_impl.h"
#include "testutil.h"
#include "vecmath.h"

// The spacing of floats at |r| (subnormal spacing below FLT_MIN).
static double float_ulp(double r) {
  int e;
  if (fabs(r) < 0x1p-126) return 0x1p-149;
  frexp(fabs(r), &e);
  return ldexp(1.0, e - 24);
}

// The error of got against want in float ulps at want; infinities must match.
static double ulps(float got, double want) {
  if (isnan(want)) return isnan(got) ? 0 : 1e9;
  if (fabs(want) > 0x1.fffffep127) return (isinf(got) && (got > 0) == (want > 0)) ? 0 : 1e9;
  return fabs((double)got - want) / float_ulp(want);
}

typedef float (*ffn)(float);
typedef double (*dfn)(double);
// sigmoid's definition in float, 1 / (1 + exp(-x)), gives 0 once exp(-x)
// overflows (x < -88.72), as PyTorch's does: the reference follows it there.
static double sigmoid_ref(double x) { return x < -88.7228 ? 0.0 : 1.0 / (1.0 + exp(-x)); }

// The worst error of f against ref over every 4099th float bit pattern.
static double sweep(ffn f, dfn ref, float *worst_at) {
  double worst = 0;
  for (uint32_t b = 0; b < 0xffffffffu - 4099; b += 4099) {
    float x;
    memcpy(&x, &b, sizeof x);
    if (x != x) continue;
    const double e = ulps(f(x), ref((double)x));
    if (e > worst) worst = e, *worst_at = x;
  }
  return worst;
}

static void check_sweep(const char *name, ffn f, dfn ref, double bound) {
  float at = 0;
  const double worst = sweep(f, ref, &at);
  print_message("%s: max error %.3f ulp (at %.9g)\n", name, worst, (double)at);
  if (worst > bound) fail_msg("%s: %.3f ulp from float64 at x = %.9g, more than %.1f", name, worst, (double)at, bound);
}

static void test_accuracy(void **state) {
  (void)state;
  check_sweep("cti_expf", cti_expf, exp, 1.5);
  check_sweep("cti_tanhf", cti_tanhf, tanh, 2.5);
  check_sweep("cti_logf", cti_logf, log, 1.5);
  check_sweep("cti_sigmoidf", cti_sigmoidf, sigmoid_ref, 2.5);
  // near 0, where tanh and log(1 + f) must keep their relative accuracy
  double wt = 0, wl = 0;
  for (int i = -200000; i <= 200000; ++i) {
    const float x = (float)i * 1e-6f, y = 1.0f + (float)i * 1e-7f;
    wt = fmax(wt, ulps(cti_tanhf(x), tanh((double)x)));
    wl = fmax(wl, ulps(cti_logf(y), log((double)y)));
  }
  print_message("near 0: tanh %.3f ulp, log(1 + t) %.3f ulp\n", wt, wl);
  if (wt > 2.5 || wl > 1.5) fail_msg("near 0: tanh %.3f ulp, log(1 + t) %.3f ulp", wt, wl);
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_special_values(void **state) {
  (void)state;
  const float inf = INFINITY, nan = NAN, tiny = 0x1p-149f;
  // exp
  assert_true(cti_expf(inf) == inf && cti_expf(-inf) == 0 && isnan(cti_expf(nan)));
  assert_true(cti_expf(0.0f) == 1 && cti_expf(-0.0f) == 1 && cti_expf(89.0f) == inf && cti_expf(-110) == 0);
  assert_true(cti_expf(88.72f) == (float)exp((double)88.72f) && cti_expf(88.73f) == inf); // the last finite, rounded once
  assert_true(cti_expf(-100) > 0 && cti_expf(-100) == (float)exp(-100.0));        // subnormal, rounded once
  // tanh
  assert_true(same_bits(cti_tanhf(0.0f), 0.0f) && same_bits(cti_tanhf(-0.0f), -0.0f));
  assert_true(cti_tanhf(inf) == 1 && cti_tanhf(-inf) == -1 && isnan(cti_tanhf(nan)));
  assert_true(cti_tanhf(9.5f) == 1 && cti_tanhf(1e30f) == 1 && cti_tanhf(-3.4e38f) == -1);
  assert_true(cti_tanhf(tiny) == tiny && cti_tanhf(-1e-30f) == -1e-30f); // tanh(x) = x below 2^-12
  for (float x = 0.1f; x < 12; x += 0.37f) assert_true(same_bits(cti_tanhf(-x), -cti_tanhf(x))); // odd
  // log
  assert_true(cti_logf(1.0f) == 0 && cti_logf(inf) == inf && isnan(cti_logf(nan)));
  assert_true(cti_logf(0.0f) == -inf && cti_logf(-0.0f) == -inf && isnan(cti_logf(-1.0f)) && isnan(cti_logf(-inf)));
  assert_true(cti_logf(tiny) == (float)log((double)tiny) && cti_logf(0x1.fffffep127f) == (float)log(0x1.fffffep127));
  assert_true(cti_logf(2.0f) == (float)log(2.0) && cti_logf(0.5f) == (float)log(0.5));
  // sigmoid
  assert_true(cti_sigmoidf(0.0f) == 0.5f && cti_sigmoidf(inf) == 1 && cti_sigmoidf(-inf) == 0 && isnan(cti_sigmoidf(nan)));
  assert_true(cti_sigmoidf(-120.0f) == 0 && cti_sigmoidf(100.0f) == 1);
}

// The runtime's unary ops on float tensors are these functions.
static void test_runtime_ops_use_them(void **state) {
  (void)state;
  const int64_t n = 5000;
  double *x = malloc(n * sizeof *x);
  tu_fill_uniform(x, n, -30, 30);
  x[0] = 0, x[1] = -0.0, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN, x[5] = 1e-40, x[6] = 88.5, x[7] = -103;
  static const struct {
    ct_unary_op op;
    ffn f;
    bool positive; // log: |x| + tiny
  } ops[] = {{CT_OP_EXP, cti_expf, false}, {CT_OP_TANH, cti_tanhf, false},
             {CT_OP_LOG, cti_logf, true},  {CT_OP_SIGMOID, cti_sigmoidf, false}};
  const ct_dtype dts[] = {CT_F32, CT_F16, CT_BF16};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o)
    for (size_t d = 0; d < 3; ++d) {
      double *in = malloc(n * sizeof *in);
      for (int64_t i = 0; i < n; ++i) in[i] = ops[o].positive && i > 4 ? fabs(x[i]) * 7 + 1e-30 : x[i];
      ct_tensor *t = tu_from_f64(in, CT_SHAPE(n), dts[d], tu_device);
      TU_CHECK(t);
      ct_tensor *r = ct_unary(ops[o].op, t);
      TU_CHECK(r);
      double *xs = tu_to_f64(t), *got = tu_to_f64(r), *want = malloc(n * sizeof *want);
      for (int64_t i = 0; i < n; ++i) {
        unsigned char buf[8]; // in float, then rounded to the dtype once
        ct_store_f64(buf, dts[d], (double)ops[o].f((float)xs[i]));
        want[i] = ct_load_f64(buf, dts[d]);
      }
      char what[96];
      snprintf(what, sizeof what, "%s of %s", ct_unary_op_name(ops[o].op), ct_dtype_name(dts[d]));
      if (tu_device.type == CT_CPU) {
        for (int64_t i = 0; i < n; ++i)
          if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i]))) || signbit(got[i]) != signbit(want[i]))
            fail_msg("%s at x = %.9g: the op gives %.9g, core/vecmath.h %.9g", what, xs[i], got[i], want[i]);
      } else { // CUDA's own expf, logf, tanhf
        tu_assert_close(r, want, tu_rtol(dts[d]), tu_atol(dts[d]), what);
      }
      free(in), free(xs), free(got), free(want);
      ct_free(t), ct_free(r);
    }
  free(x);
}

static void test_jit_text_has_regions(void **state) {
  (void)state;
  static const char *const regions[] = {"base", "exp", "tanh", "log"};
  for (size_t i = 0; i < 4; ++i) {
    char mark[64];
    snprintf(mark, sizeof mark, "// jit-region %s\n", regions[i]);
    const char *p = strstr(cti_jit_vecmath_text, mark);
    if (!p) fail_msg("the embedded core/vecmath.h has no region %s", regions[i]);
    assert_non_null(strstr(p, "// jit-region end"));
  }
  assert_non_null(strstr(cti_jit_vecmath_text, "CTI_VM_FN float cti_tanhf(float x)"));
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accuracy),
      cmocka_unit_test(test_special_values),
      cmocka_unit_test(test_runtime_ops_use_them),
      cmocka_unit_test(test_jit_text_has_regions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
