// SPDX-License-Identifier: MIT
//
// test_transformer: the transformer layers' contracts beyond their numbers
// (those are test_transformer_torch's and test_transformer_gradcheck's), on
// the device under test:
//  - Embedding: an index out of range fails with torch's "index out of range
//    in self" (at once on the CPU; on CUDA at the next call that waits, as a
//    device-side assert), int32 indices work, float ones are refused in
//    torch's words, ct_module_backward says to use backward_params; its
//    gradient over heavily repeated indices equals a float64 sum and is
//    bit-identical from run to run (no order-dependent atomics);
//  - ct_cross_entropy: the mean runs over the rows not ignored (any
//    ignore_index), all ignored gives NaN and a zero gradient, a bad target
//    fails naming it, a shape mismatch is refused;
//  - LayerNorm's shape message, eval mode keeping nothing;
//  - ModuleDict/ModuleList: no forward, name checks, get_submodule;
//  - ct_module_tie: one parameter in parameters() and num_elements, two
//    state_dict names holding one tensor that ct_module_to keeps shared,
//    mismatches refused, ct_module_replicate refused;
//  - GELU and Embedding in float16/bfloat16 against float64 references;
//  - GELU(approximate="tanh")'s float math (transformer_kernels.h, the code
//    both devices run; its exp, core/vecmath.h's, is test_vecmath's): the value and slope within 3 ulp * (1 + |z|) of float64 over
//    x in [-10, 10] (z = -2u is exp's argument; its own rounding, ~2 ulp of
//    z, is amplified by |z|: the conditioning of any float evaluation), the
//    extremes (+-0, +-inf, NaN, huge, subnormal) as stated there.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "transformer_kernels.h"
#include "tu_ref.h"

// The error a call left, or the one a CUDA kernel reports at the next wait.
static void expect_failure(const ct_tensor *result, const char *needle, const char *what) {
  if (result && tu_device.type == CT_CUDA) {
    if (ct_cuda_synchronize(tu_device.index) == CT_OK) fail_msg("%s: no error reported after the kernel", what);
  } else if (result) {
    fail_msg("%s: succeeded", what);
  }
  tu_assert_error_contains(needle, what);
}

static ct_tensor *i64_tensor(const int64_t *v, ct_shape s) {
  ct_tensor *t = ct_from_host(v, s, CT_I64, tu_device);
  TU_CHECK(t);
  return t;
}

static void test_embedding_errors(void **state) {
  (void)state;
  ct_module *m = ct_nn_embedding(5, 3);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  const int64_t bad[4] = {0, 4, 5, 1};
  ct_tensor *idx = i64_tensor(bad, CT_SHAPE(2, 2));
  ct_tensor *y = ct_module_forward(m, idx);
  expect_failure(y, "index out of range in self", "index 5 of 5 rows");
  ct_free(y), ct_free(idx);
  const int64_t neg[2] = {-1, 0};
  idx = i64_tensor(neg, CT_SHAPE(2));
  y = ct_module_forward(m, idx);
  expect_failure(y, "index out of range in self", "index -1");
  ct_free(y), ct_free(idx);
  // int32 indices give the same rows as int64
  const int32_t i32[3] = {4, 0, 4};
  const int64_t i64[3] = {4, 0, 4};
  ct_tensor *a = ct_from_host(i32, CT_SHAPE(3), CT_I32, tu_device), *b = i64_tensor(i64, CT_SHAPE(3));
  TU_CHECK(a);
  ct_tensor *ya = ct_module_forward(m, a), *yb = ct_module_forward(m, b);
  TU_CHECK(ya);
  TU_CHECK(yb);
  double *va = tu_to_f64(ya), *vb = tu_to_f64(yb);
  if (memcmp(va, vb, 9 * sizeof *va)) fail_msg("int32 and int64 indices give different rows");
  free(va), free(vb);
  ct_tensor *f = ct_zeros(CT_SHAPE(3), CT_F32, tu_device);
  TU_CHECK(f);
  ct_tensor *yf = ct_module_forward(m, f);
  if (yf) fail_msg("float indices accepted");
  tu_assert_error_contains("'indices' to have one of the following scalar types: Long, Int", "float indices");
  ct_tensor *dx = ct_module_backward(m, yb);
  if (dx) fail_msg("Embedding's ct_module_backward returned a tensor");
  tu_assert_error_contains("use ct_module_backward_params", "Embedding backward");
  ct_free(a), ct_free(b), ct_free(ya), ct_free(yb), ct_free(f);
  ct_module_free(m);
}

// 4096 positions over 3 rows: each row of dweight sums ~1365 float32 rows.
static void test_embedding_deterministic(void **state) {
  (void)state;
  const int64_t n = 4096, v = 3, c = 70;
  ct_module *m = ct_nn_embedding(v, c);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  int64_t *idx = malloc((size_t)n * sizeof *idx);
  double *u = ref_alloc(n), *g = NULL;
  tu_fill_uniform(u, n, 0, 3);
  for (int64_t i = 0; i < n; ++i) idx[i] = (int64_t)u[i] % v;
  ct_tensor *it = i64_tensor(idx, CT_SHAPE(n));
  ct_tensor *gt = ref_tensor(CT_SHAPE(n, c), CT_F32, tu_device, -1, 1, &g);
  double *ref = calloc((size_t)(v * c), sizeof *ref);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) ref[idx[i] * c + j] += g[i * c + j];
  double *first = NULL;
  for (int run = 0; run < 3; ++run) {
    ct_tensor *y = ct_module_forward(m, it);
    TU_CHECK(y);
    TU_OK(ct_module_zero_grad(m, true));
    TU_OK(ct_module_backward_params(m, gt));
    int np = 0;
    ct_param **ps = ct_module_parameters(m, &np);
    double *got = tu_to_f64(ps[0]->grad);
    if (!first) {
      tu_assert_close(ps[0]->grad, ref, 0, 1e-6 * (double)n, "Embedding dweight against a float64 sum");
      first = got;
    } else {
      if (memcmp(first, got, (size_t)(v * c) * sizeof *got)) fail_msg("run %d's dweight differs from run 0's", run);
      free(got);
    }
    ct_free(y);
  }
  free(first), free(ref), free(idx), free(u), free(g);
  ct_free(it), ct_free(gt);
  ct_module_free(m);
}

// The mean over the rows not ignored, in float64, and its gradient.
static void ce_reference(const double *x, const int64_t *t, int64_t n, int64_t v, int64_t ignore, double *loss,
                         double *g) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += t[i] != ignore;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double *xi = x + i * v;
    double m = xi[0], z = 0;
    for (int64_t j = 1; j < v; ++j) m = fmax(m, xi[j]);
    for (int64_t j = 0; j < v; ++j) z += exp(xi[j] - m);
    for (int64_t j = 0; j < v; ++j)
      g[i * v + j] = t[i] == ignore ? 0 : (exp(xi[j] - m) / z - (j == t[i])) / (double)count;
    if (t[i] != ignore) s += log(z) + m - xi[t[i]];
  }
  *loss = s / (double)count;
}

static void test_cross_entropy(void **state) {
  (void)state;
  const int64_t n = 6, v = 9;
  double *x = NULL;
  ct_tensor *xt = ref_tensor(CT_SHAPE(2, 3, v), CT_F64, tu_device, -3, 3, &x);
  for (int ignore = 0; ignore < 2; ++ignore) {
    const int64_t ig = ignore ? 0 : -100; // class 0 as the ignored value, too
    const int64_t t[6] = {3, ig, 8, 0, ig, 1};
    ct_tensor *tt = i64_tensor(t, CT_SHAPE(2, 3));
    double want = 0, *gw = ref_alloc(n * v);
    ce_reference(x, t, n, v, ig, &want, gw);
    ct_tensor *g = NULL;
    ct_tensor *l = ct_cross_entropy(xt, tt, ig, &g);
    TU_CHECK(l);
    tu_assert_close(l, &want, 1e-12, 0, "ct_cross_entropy loss");
    tu_assert_close(g, gw, 1e-12, 1e-15, "ct_cross_entropy dlogits");
    ct_free(l), ct_free(g), ct_free(tt);
    free(gw);
  }
  const int64_t all[6] = {-100, -100, -100, -100, -100, -100};
  ct_tensor *tt = i64_tensor(all, CT_SHAPE(2, 3)), *g = NULL;
  ct_tensor *l = ct_cross_entropy(xt, tt, -100, &g);
  TU_CHECK(l);
  double lv = 0;
  TU_OK(ct_item(l, &lv));
  if (!isnan(lv)) fail_msg("all targets ignored: loss %g, torch gives nan", lv);
  double *zero = calloc((size_t)(n * v), sizeof *zero);
  tu_assert_close(g, zero, 0, 0, "all ignored: dlogits");
  free(zero);
  ct_free(l), ct_free(g), ct_free(tt);
  const int64_t badt[6] = {0, 1, 9, 2, 3, 4};
  tt = i64_tensor(badt, CT_SHAPE(2, 3));
  l = ct_cross_entropy(xt, tt, -100, NULL);
  expect_failure(l, "Target 9 is out of bounds.", "target 9 of 9 classes");
  ct_free(l), ct_free(tt);
  tt = i64_tensor(badt, CT_SHAPE(6));
  if ((l = ct_cross_entropy(xt, tt, -100, NULL))) fail_msg("(2, 3, 9) logits with (6,) targets accepted");
  tu_assert_error_contains("same leading dims", "shape mismatch");
  ct_free(tt), ct_free(xt);
  free(x);
}

static void test_layernorm(void **state) {
  (void)state;
  ct_module *m = ct_nn_layernorm(6, 1e-5);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  ct_tensor *x = ct_zeros(CT_SHAPE(2, 5), CT_F32, tu_device);
  TU_CHECK(x);
  ct_tensor *y = ct_module_forward(m, x);
  if (y) fail_msg("LayerNorm(6) accepted (2, 5)");
  tu_assert_error_contains("expected input with shape [*, 6], but got input of size", "LayerNorm shape");
  ct_free(x);
  double *xv = NULL;
  x = ref_tensor(CT_SHAPE(3, 6), CT_F32, tu_device, -1, 1, &xv);
  ct_module_train(m, false);
  TU_CHECK(y = ct_module_forward(m, x));
  ct_tensor *dx = ct_module_backward(m, y);
  if (dx) fail_msg("LayerNorm backward after an eval forward");
  tu_assert_error_contains("no saved input", "eval keeps nothing");
  // eval computes what training computes (no running statistics)
  ct_module_train(m, true);
  ct_tensor *yt = ct_module_forward(m, x);
  TU_CHECK(yt);
  double *a = tu_to_f64(y);
  tu_assert_close(yt, a, 0, 0, "LayerNorm eval vs train");
  free(a), free(xv);
  ct_free(x), ct_free(y), ct_free(yt);
  ct_module_free(m);
}

static void test_containers(void **state) {
  (void)state;
  ct_module *mods[2] = {ct_nn_linear(3, 4, true), ct_nn_gelu(true)};
  static const char *const names[2] = {"fc", "act"};
  ct_module *d = ct_nn_module_dict(2, names, mods);
  TU_CHECK(d);
  TU_OK(ct_module_to(d, tu_device));
  ct_tensor *x = ct_zeros(CT_SHAPE(2, 3), CT_F32, tu_device);
  ct_tensor *y = ct_module_forward(d, x);
  if (y) fail_msg("a ModuleDict ran a forward");
  tu_assert_error_contains("ModuleDict: a container has no forward", "ModuleDict forward");
  if (ct_module_get_submodule(d, "fc") != mods[0] || ct_module_get_submodule(d, "") != d)
    fail_msg("get_submodule found the wrong module");
  if (ct_module_get_submodule(d, "fc.weight")) fail_msg("get_submodule found a module under a Linear");
  tu_assert_error_contains("Linear has no attribute `weight`", "get_submodule");
  int n = 0;
  ct_param **ps = ct_module_state(d, &n);
  if (n != 2 || strcmp(ps[0]->name, "fc.weight") || strcmp(ps[1]->name, "fc.bias"))
    fail_msg("ModuleDict state names: %d, %s", n, n ? ps[0]->name : "");
  ct_free(x);
  ct_module_free(d);
  ct_module *dup[2] = {ct_nn_gelu(true), ct_nn_gelu(false)};
  static const char *const same[2] = {"a", "a"};
  if (ct_nn_module_dict(2, same, dup)) fail_msg("two children named alike");
  tu_assert_error_contains("two children have the same name", "duplicate names");
  ct_module *dots[1] = {ct_nn_gelu(true)};
  static const char *const dotted[1] = {"a.b"};
  if (ct_nn_module_dict(1, dotted, dots)) fail_msg("a dotted child name");
  tu_assert_error_contains("without dots", "dotted name");
  ct_module *l[2] = {ct_nn_layernorm(4, 1e-5), ct_nn_layernorm(4, 1e-5)};
  ct_module *list = ct_nn_module_list(2, l);
  TU_CHECK(list);
  ps = ct_module_state(list, &n);
  if (n != 4 || strcmp(ps[2]->name, "1.weight")) fail_msg("ModuleList names");
  char *s = ct_module_str(list);
  TU_CHECK(s);
  if (strncmp(s, "ModuleList(\n  (0): LayerNorm((4,), eps=1e-05, elementwise_affine=True)", 70))
    fail_msg("print(ModuleList): %s", s);
  free(s);
  ct_module_free(list);
}

static void test_tie(void **state) {
  (void)state;
  ct_module *mods[3] = {ct_nn_embedding(10, 4), ct_nn_layernorm(4, 1e-5), ct_nn_linear(4, 10, false)};
  static const char *const names[3] = {"wte", "ln", "lm_head"};
  ct_module *root = ct_nn_module_dict(3, names, mods);
  TU_CHECK(root);
  const int64_t before = ct_module_num_elements(root);
  TU_OK(ct_module_tie(mods[2], "weight", mods[0], "weight"));
  if (ct_module_num_elements(root) != before - 40) fail_msg("num_elements counts the tied weight twice");
  int np = 0, ns = 0;
  ct_param **ps = ct_module_parameters(root, &np);
  if (np != 3 || strcmp(ps[0]->name, "wte.weight")) fail_msg("parameters(): %d, first %s", np, ps[0]->name);
  TU_OK(ct_module_to(root, tu_device));
  ct_param **st = ct_module_state(root, &ns);
  if (ns != 4 || strcmp(st[3]->name, "lm_head.weight") || st[3]->value != st[0]->value)
    fail_msg("after .to(): lm_head.weight is not wte.weight's tensor");
  if (!ct_device_eq(ct_device_of(st[3]->value), tu_device)) fail_msg("the tied tensor did not move");
  ct_module *other = ct_nn_linear(4, 9, false);
  TU_CHECK(other);
  if (ct_module_tie(other, "weight", mods[0], "weight") == CT_OK) fail_msg("tied (9, 4) to (10, 4)");
  tu_assert_error_contains("they must agree", "shape mismatch");
  if (ct_module_tie(mods[1], "weight", mods[0], "weight") == CT_OK) fail_msg("tied a LayerNorm");
  tu_assert_error_contains("only a Linear's or an Embedding's parameter", "LayerNorm tie");
  if (ct_module_replicate(root, tu_device)) fail_msg("replicated a tied model");
  tu_assert_error_contains("tied parameters", "replicate");
  ct_module_free(other);
  ct_module_free(root);
}

// GELU and Embedding in float16 / bfloat16: values within a rounding or
// two of the float64 formula (torch computes them in float and rounds once).
static void test_low_precision(void **state) {
  (void)state;
  const ct_dtype dts[2] = {CT_F16, CT_BF16};
  for (int k = 0; k < 2; ++k) {
    const ct_dtype dt = dts[k];
    const double eps = ref_eps(dt);
    double *x = NULL;
    ct_tensor *xt = ref_tensor(CT_SHAPE(300), dt, tu_device, -4, 4, &x);
    double *want = ref_alloc(300);
    for (int ta = 0; ta < 2; ++ta) {
      for (int i = 0; i < 300; ++i)
        want[i] = ta ? 0.5 * x[i] * (1 + tanh(0.7978845608028654 /* sqrt(2/pi) */ * (x[i] + 0.044715 * x[i] * x[i] * x[i])))
                     : 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
      ct_module *m = ct_nn_gelu(ta);
      TU_OK(ct_module_to(m, tu_device));
      ct_tensor *y = ct_module_forward(m, xt);
      TU_CHECK(y);
      if (ct_dtype_of(y) != dt) fail_msg("GELU changed the dtype");
      tu_assert_close(y, want, 2 * eps, 1e-6, ta ? "GELU tanh, low precision" : "GELU erf, low precision");
      ct_free(y);
      ct_module_free(m);
    }
    ct_module *e = ct_nn_embedding(4, 8);
    int n = 0;
    ct_param **ps = ct_module_state(e, &n);
    ct_tensor *w = ct_to_dtype(ps[0]->value, dt);
    TU_CHECK(w);
    ct_free(ps[0]->value);
    ps[0]->value = w;
    TU_OK(ct_module_to(e, tu_device));
    const int64_t idx[5] = {3, 1, 3, 3, 0};
    ct_tensor *it = i64_tensor(idx, CT_SHAPE(5));
    ct_tensor *y = ct_module_forward(e, it);
    TU_CHECK(y);
    double *wv = tu_to_f64(ps[0]->value), *yv = tu_to_f64(y), *g = NULL, ref[32] = {0};
    for (int i = 0; i < 5; ++i)
      if (memcmp(yv + i * 8, wv + idx[i] * 8, 8 * sizeof *yv)) fail_msg("a low-precision lookup changed a row");
    ct_tensor *gt = ref_tensor(CT_SHAPE(5, 8), dt, tu_device, -1, 1, &g);
    TU_OK(ct_module_backward_params(e, gt));
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 8; ++j) ref[idx[i] * 8 + j] += g[i * 8 + j];
    tu_assert_close(ps[0]->grad, ref, eps, 0, "Embedding dweight, low precision");
    free(wv), free(yv), free(g), free(x), free(want);
    ct_free(it), ct_free(y), ct_free(gt), ct_free(xt);
    ct_module_free(e);
  }
}

// The spacing of floats at |r| (subnormal spacing below FLT_MIN).
static double float_ulp(double r) {
  int e;
  if (fabs(r) < 0x1p-126) return 0x1p-149;
  frexp(fabs(r), &e);
  return ldexp(1.0, e - 24);
}

static void test_gelu_float_math(void **state) {
  (void)state;
  const double k = 0.7978845608028654, a = 0.044715;
  double wv = 0, ws = 0;
  for (int64_t i = -2000000; i <= 2000000; ++i) {
    const float x = (float)((double)i * 5e-6);
    // float64 reference, the same function written without cancellation:
    // s = 1 / (1 + exp(z)) = (1 + tanh(u)) / 2
    const double xd = x, z = -2 * k * (xd + a * xd * xd * xd), s = 1 / (1 + exp(z));
    const double v = xd * s, t1 = s, t2 = xd * s * (1 - s) * 2 * k * (1 + 3 * a * xd * xd);
    const double ev = fabs(cti_gelu_tanh_valuef(x) - v) / float_ulp(v) / (1 + fabs(z));
    // the slope s + t2 cancels near x = -0.75: measured in ulps of its larger term
    const double es = fabs(cti_gelu_tanh_slopef(x) - (t1 + t2)) / float_ulp(fmax(fabs(t1), fabs(t2))) / (1 + fabs(z));
    if (ev > wv) wv = ev;
    if (es > ws) ws = es;
  }
  print_message("GELU tanh in float: value %.3f, slope %.3f ulp * (1 + |z|)\n", wv, ws);
  if (wv > 3 || ws > 3) fail_msg("GELU tanh in float: value %.3f, slope %.3f ulp * (1 + |z|), more than 3", wv, ws);

  // extremes: gelu(x) ~ x and 0 on the two sides, slope 1 and 0
  const float inf = INFINITY, nan = NAN;
  const float big[] = {1e30f, 3.4e38f, inf};
  for (int i = 0; i < 3; ++i) {
    assert_true(cti_gelu_tanh_valuef(big[i]) == big[i] && cti_gelu_tanh_slopef(big[i]) == 1);
    assert_true(cti_gelu_tanh_slopef(-big[i]) == 0);
  }
  assert_true(cti_gelu_tanh_valuef(-1e30f) == 0 && signbit(cti_gelu_tanh_valuef(-1e30f)));
  assert_true(isnan(cti_gelu_tanh_valuef(-inf))); // -inf * 0, as torch
  assert_true(isnan(cti_gelu_tanh_valuef(nan)) && isnan(cti_gelu_tanh_slopef(nan)));
  assert_true(cti_gelu_tanh_valuef(0.0f) == 0 && !signbit(cti_gelu_tanh_valuef(0.0f)));
  assert_true(cti_gelu_tanh_valuef(-0.0f) == 0 && signbit(cti_gelu_tanh_valuef(-0.0f)));
  assert_true(cti_gelu_tanh_slopef(0.0f) == 0.5f && cti_gelu_tanh_slopef(-0.0f) == 0.5f);
  assert_true(cti_gelu_tanh_valuef(1e-40f) == 0.5e-40f); // subnormal: x / 2
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedding_errors), cmocka_unit_test(test_embedding_deterministic),
      cmocka_unit_test(test_cross_entropy),    cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_containers),       cmocka_unit_test(test_tie),
      cmocka_unit_test(test_low_precision),    cmocka_unit_test(test_gelu_float_math),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
