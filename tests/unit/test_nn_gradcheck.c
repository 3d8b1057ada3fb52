// SPDX-License-Identifier: MIT
//
// test_nn_gradcheck: every module's and every loss's backward against
// central finite differences, in float64 on the CPU.
//
// Invariant checked: for L = sum(forward(x) * G) with a fixed random G (so
// dL/dy = G), each element of dL/dx and of every parameter's grad from
// backward equals (L(v + eps) - L(v - eps)) / (2 eps) with eps = 1e-6, to a
// relative error below 1e-6. For the losses L is the loss itself. Why that
// is a fair bound: the truncation error of a central difference is
// eps^2 |f'''| / 6 (about 1e-12 here; Linear, Flatten and Dropout are linear
// in each variable, so it is 0 for them), and the rounding of L, a few ulps
// of L divided by 2 eps, costs about 1e-10 |L| (|L| is a few here); so the
// relative error is measured against max(|analytic|, |numeric|, 1e-3), a
// floor that keeps that rounding of a near-zero gradient from reading as a
// large relative error.
// Dropout draws the same mask in every evaluation because the generator is
// reseeded before each forward. ReLU inputs stay away from the kink at 0
// (|x| >= 0.1; a hidden pre-activation within 1e-6 of 0 would be a 1e-5
// chance per element, and the largest error seen in many runs is 2e-7).
//
// The check runs on the CPU only (float64 is the CPU's); the gpu.* variant
// of this test exits 77 (skipped).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

#define EPS 1e-6
#define RTOL 1e-6
#define FLOOR 1e-3
static const uint64_t MASK_SEED = 0x9e3779b97f4a7c15ull;

// Replaces every parameter and buffer of m by its float64 copy.
static void to_f64(ct_module *m) {
  int n = 0;
  ct_param **s = ct_module_state(m, &n);
  for (int i = 0; i < n; ++i) {
    if (!ct_dtype_is_floating(ct_dtype_of(s[i]->value))) continue;
    ct_tensor *v = ct_to_dtype(s[i]->value, CT_F64);
    TU_CHECK(v);
    ct_free(s[i]->value);
    s[i]->value = v;
  }
}

// sum(y * G) in double, y = forward(x) with the dropout generator reseeded.
static double objective(ct_module *m, const ct_tensor *x, const double *G) {
  ct_manual_seed(MASK_SEED);
  ct_tensor *y = ct_module_forward(m, x);
  TU_CHECK(y);
  double *v = tu_to_f64(y), s = 0;
  for (int64_t i = 0; i < ct_numel(y); ++i) s += v[i] * G[i];
  free(v);
  ct_free(y);
  return s;
}

static double max_err; // the largest relative error seen, printed at the end

static void compare(double analytic, double numeric, const char *what, int64_t i) {
  double scale = fmax(fmax(fabs(analytic), fabs(numeric)), FLOOR);
  double err = fabs(analytic - numeric) / scale;
  if (err > max_err) max_err = err;
  if (!(err < RTOL))
    fail_msg("%s[%lld]: backward %.12g, finite difference %.12g (relative error %.3g)", what, (long long)i,
             analytic, numeric, err);
}

// Checks dL/dv for every element of the float64 CPU tensor v against
// backward's answer `an`, recomputing L with f.
static void check_tensor(ct_module *m, const ct_tensor *x, const double *G, ct_tensor *v, const double *an,
                         const char *what) {
  double *p = ct_data_ptr(v);
  for (int64_t i = 0; i < ct_numel(v); ++i) {
    double keep = p[i];
    p[i] = keep + EPS;
    double lp = objective(m, x, G);
    p[i] = keep - EPS;
    double lm = objective(m, x, G);
    p[i] = keep;
    compare(an[i], (lp - lm) / (2 * EPS), what, i);
  }
}

// x: values in +-[0.1, 1] (away from ReLU's kink), float64 on the CPU.
static ct_tensor *input(ct_shape s) {
  int64_t n = ct_shape_numel(s);
  double *v = ref_alloc(n);
  tu_fill_uniform(v, n, -0.9, 0.9);
  for (int64_t i = 0; i < n; ++i) v[i] += v[i] < 0 ? -0.1 : 0.1;
  ct_tensor *t = tu_from_f64(v, s, CT_F64, ct_device_cpu());
  free(v);
  TU_CHECK(t);
  return t;
}

static void gradcheck(ct_module *m, ct_shape xs, const char *name) {
  TU_CHECK(m);
  to_f64(m);
  ct_tensor *x = input(xs);
  // G from the output's shape
  ct_manual_seed(MASK_SEED);
  ct_tensor *y = ct_module_forward(m, x);
  TU_CHECK(y);
  int64_t ny = ct_numel(y);
  double *G = ref_alloc(ny);
  tu_fill_uniform(G, ny, -1, 1);
  ct_tensor *Gt = tu_from_f64(G, ct_shape_of(y), CT_F64, ct_device_cpu());
  TU_CHECK(Gt);
  TU_OK(ct_module_zero_grad(m, true));
  ct_tensor *dx = ct_module_backward(m, Gt);
  TU_CHECK(dx);
  double *dxv = tu_to_f64(dx);
  char what[160];
  snprintf(what, sizeof what, "%s d input", name);
  check_tensor(m, x, G, x, dxv, what);
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  for (int k = 0; k < np; ++k) {
    TU_CHECK(ps[k]->grad);
    double *gv = tu_to_f64(ps[k]->grad);
    snprintf(what, sizeof what, "%s d %s", name, ps[k]->name);
    check_tensor(m, x, G, ps[k]->value, gv, what);
    free(gv);
  }
  free(G), free(dxv);
  ct_free(x), ct_free(y), ct_free(Gt), ct_free(dx);
  ct_module_free(m);
}

static void test_linear(void **state) {
  (void)state;
  gradcheck(ct_nn_linear(5, 3, true), CT_SHAPE(4, 5), "Linear(5, 3)");
  gradcheck(ct_nn_linear(4, 2, false), CT_SHAPE(3, 4), "Linear(4, 2, bias=False)");
  gradcheck(ct_nn_linear(3, 2, true), CT_SHAPE(2, 2, 3), "Linear(3, 2) on (2, 2, 3)");
}

static void test_activations(void **state) {
  (void)state;
  gradcheck(ct_nn_relu(), CT_SHAPE(4, 6), "ReLU");
  gradcheck(ct_nn_flatten(), CT_SHAPE(2, 3, 4), "Flatten");
  gradcheck(ct_nn_dropout(0.4), CT_SHAPE(5, 8), "Dropout(0.4)");
  gradcheck(ct_nn_dropout(0.0), CT_SHAPE(5, 8), "Dropout(0)");
}

static void test_sequential(void **state) {
  (void)state;
  gradcheck(ct_nn_sequential(4, (ct_module *[]){ct_nn_linear(6, 5, true), ct_nn_relu(), ct_nn_dropout(0.2),
                                                 ct_nn_linear(5, 3, true)}),
            CT_SHAPE(4, 6), "Sequential(Linear, ReLU, Dropout, Linear)");
  gradcheck(ct_nn_sequential(2, (ct_module *[]){ct_nn_flatten(), ct_nn_linear(12, 4, true)}), CT_SHAPE(3, 3, 4),
            "Sequential(Flatten, Linear)");
}

// Finite differences of a loss with respect to its first argument.
typedef ct_tensor *(*loss_fn)(const ct_tensor *, const ct_tensor *, ct_tensor **);

static double loss_value(loss_fn f, const ct_tensor *p, const ct_tensor *t) {
  ct_tensor *l = f(p, t, NULL);
  TU_CHECK(l);
  double v;
  TU_OK(ct_item(l, &v));
  ct_free(l);
  return v;
}

static void check_loss(loss_fn f, ct_tensor *p, const ct_tensor *t, const char *name) {
  ct_tensor *g = NULL, *l = f(p, t, &g);
  TU_CHECK(l);
  TU_CHECK(g);
  double *an = tu_to_f64(g), *pv = ct_data_ptr(p);
  for (int64_t i = 0; i < ct_numel(p); ++i) {
    double keep = pv[i];
    pv[i] = keep + EPS;
    double lp = loss_value(f, p, t);
    pv[i] = keep - EPS;
    double lm = loss_value(f, p, t);
    pv[i] = keep;
    compare(an[i], (lp - lm) / (2 * EPS), name, i);
  }
  free(an);
  ct_free(l), ct_free(g);
}

static void test_losses(void **state) {
  (void)state;
  ct_tensor *p = input(CT_SHAPE(4, 5)), *t = input(CT_SHAPE(4, 5));
  check_loss(ct_mse_loss, p, t, "MSELoss d input");
  ct_free(p), ct_free(t);
  const int64_t n = 5, c = 7;
  ct_tensor *x = input(CT_SHAPE(n, c));
  double tg[5];
  tu_fill_uniform(tg, n, 0, (double)c);
  int64_t ti[5];
  for (int i = 0; i < n; ++i) ti[i] = (int64_t)tg[i];
  ct_tensor *tt = ct_from_host(ti, CT_SHAPE(n), CT_I64, ct_device_cpu());
  TU_CHECK(tt);
  check_loss(ct_cross_entropy_loss, x, tt, "CrossEntropyLoss d logits");
  // (Large or spread-out logits are checked against float64 references in
  // test_nn instead: L grows with them, and so does its rounding over 2 eps.)
  ct_free(x), ct_free(tt);
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], "--device") && strcmp(argv[i + 1], "cpu") != 0) {
      printf("skipped: the finite-difference checks run in float64 on the CPU only (see unit.nn_gradcheck)\n");
      return 77;
    }
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_sequential),
      cmocka_unit_test(test_losses),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  printf("largest relative error %.3g (bound %g)\n", max_err, RTOL);
  return rc;
}
