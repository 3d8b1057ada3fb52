// SPDX-License-Identifier: MIT
//
// test_nn: the nn framework (Sequential, names, state, .to, zero_grad,
// load_state_dict, print(model)), the layers Linear, ReLU, Flatten, Dropout,
// and the losses MSE and cross-entropy, on the device under test.
//
// Invariant checked: every forward and backward equals the float64 math of
// the same inputs and weights computed here (the weights are read back from
// the module), within a tolerance fitted to float32 and to the number of
// terms summed; dropout keeps each element with probability 1 - p (within 5
// standard deviations), scales kept ones by exactly (float)(1/(1-p)), draws
// its mask from the device's Philox stream (u >= p, u = ct_rand) and uses
// that same mask backward; names, orders, messages and print(model) are
// PyTorch's (the strings below were printed by torch 1.13).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

// y = x W^T + b in float64: x (n, in), W (out, in), b (out) or NULL; sa the
// absolute sums of the terms.
static void ref_linear(const double *x, const double *w, const double *b, int64_t n, int64_t in,
                       int64_t out, double *y, double *sa) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b[o] : 0, a = b ? fabs(b[o]) : 0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i], a += fabs(x[r * in + i] * w[o * in + i]);
      y[r * out + o] = s;
      sa[r * out + o] = a;
    }
}

// Linear backward in float64: dx = g W, dW = g^T x, db = sum_r g.
static void ref_linear_backward(const double *x, const double *w, const double *g, int64_t n,
                                int64_t in, int64_t out, double *dx, double *dx_sa, double *dw,
                                double *dw_sa, double *db, double *db_sa) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < in; ++i) {
      double s = 0, a = 0;
      for (int64_t o = 0; o < out; ++o) s += g[r * out + o] * w[o * in + i], a += fabs(g[r * out + o] * w[o * in + i]);
      dx[r * in + i] = s, dx_sa[r * in + i] = a;
    }
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      double s = 0, a = 0;
      for (int64_t r = 0; r < n; ++r) s += g[r * out + o] * x[r * in + i], a += fabs(g[r * out + o] * x[r * in + i]);
      dw[o * in + i] = s, dw_sa[o * in + i] = a;
    }
    double s = 0, a = 0;
    for (int64_t r = 0; r < n; ++r) s += g[r * out + o], a += fabs(g[r * out + o]);
    db[o] = s, db_sa[o] = a;
  }
}

// ---- Linear ---------------------------------------------------------------------------------------
static void check_linear(int64_t n, int64_t in, int64_t out, bool bias) {
  ct_module *m = ref_on_device(ct_nn_linear(in, out, bias));
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(n, in), CT_F32, tu_device, -2, 2, &x);
  ct_tensor *gt = ref_tensor(CT_SHAPE(n, out), CT_F32, tu_device, -1, 1, &g);
  double *w = ref_values(ref_param(m, "weight")->value);
  double *b = bias ? ref_values(ref_param(m, "bias")->value) : NULL;
  double *y = ref_alloc(n * out), *ysa = ref_alloc(n * out);
  ref_linear(x, w, b, n, in, out, y, ysa);
  ct_tensor *yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  ref_assert_shape(yt, CT_SHAPE(n, out), "Linear forward");
  ref_assert_sum_close(yt, y, ysa, in + 1, "Linear forward");
  ct_tensor *dxt = ct_module_backward(m, gt);
  TU_CHECK(dxt);
  ref_assert_shape(dxt, CT_SHAPE(n, in), "Linear dx");
  double *dx = ref_alloc(n * in), *dxsa = ref_alloc(n * in), *dw = ref_alloc(out * in),
         *dwsa = ref_alloc(out * in), *db = ref_alloc(out), *dbsa = ref_alloc(out);
  ref_linear_backward(x, w, g, n, in, out, dx, dxsa, dw, dwsa, db, dbsa);
  ref_assert_sum_close(dxt, dx, dxsa, out, "Linear dx");
  TU_CHECK(ref_param(m, "weight")->grad);
  ref_assert_sum_close(ref_param(m, "weight")->grad, dw, dwsa, n, "Linear dW");
  if (bias) ref_assert_sum_close(ref_param(m, "bias")->grad, db, dbsa, n, "Linear db");
  free(x), free(g), free(w), free(b), free(y), free(ysa), free(dx), free(dxsa), free(dw), free(dwsa),
      free(db), free(dbsa);
  ct_free(xt), ct_free(gt), ct_free(yt), ct_free(dxt);
  ct_module_free(m);
}

static void test_linear(void **state) {
  (void)state;
  check_linear(4, 5, 3, true);
  check_linear(7, 33, 17, false);
  check_linear(1, 1, 1, true);
  check_linear(64, 100, 10, true);
}

// (*, in) inputs: leading dims are batch dims, as torch.nn.Linear.
static void test_linear_3d(void **state) {
  (void)state;
  ct_module *m = ref_on_device(ct_nn_linear(5, 3, true));
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(2, 4, 5), CT_F32, tu_device, -1, 1, &x);
  ct_tensor *gt = ref_tensor(CT_SHAPE(2, 4, 3), CT_F32, tu_device, -1, 1, &g);
  double *w = ref_values(ref_param(m, "weight")->value), *b = ref_values(ref_param(m, "bias")->value);
  double y[24], ysa[24], dx[40], dxsa[40], dw[15], dwsa[15], db[3], dbsa[3];
  ref_linear(x, w, b, 8, 5, 3, y, ysa);
  ref_linear_backward(x, w, g, 8, 5, 3, dx, dxsa, dw, dwsa, db, dbsa);
  ct_tensor *yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  ref_assert_shape(yt, CT_SHAPE(2, 4, 3), "Linear 3-d forward");
  ref_assert_sum_close(yt, y, ysa, 6, "Linear 3-d forward");
  ct_tensor *dxt = ct_module_backward(m, gt);
  TU_CHECK(dxt);
  ref_assert_shape(dxt, CT_SHAPE(2, 4, 5), "Linear 3-d dx");
  ref_assert_sum_close(dxt, dx, dxsa, 3, "Linear 3-d dx");
  ref_assert_sum_close(ref_param(m, "weight")->grad, dw, dwsa, 8, "Linear 3-d dW");
  ref_assert_sum_close(ref_param(m, "bias")->grad, db, dbsa, 8, "Linear 3-d db");
  // wrong inner size: torch's words
  ct_tensor *bad = ct_zeros(CT_SHAPE(4, 2), CT_F32, tu_device);
  TU_CHECK(bad);
  assert_null(ct_module_forward(m, bad));
  ref_assert_error(CT_ERR_SHAPE, "Linear (4, 2)", "mat1 and mat2 shapes cannot be multiplied", NULL);
  free(x), free(g), free(w), free(b);
  ct_free(xt), ct_free(gt), ct_free(yt), ct_free(dxt), ct_free(bad);
  ct_module_free(m);
}

// Two backward passes add their gradients, as autograd accumulates .grad.
static void test_grad_accumulation(void **state) {
  (void)state;
  const int64_t n = 6, in = 4, out = 3;
  ct_module *m = ref_on_device(ct_nn_linear(in, out, true));
  double *x1, *x2, *g1, *g2;
  ct_tensor *xt1 = ref_tensor(CT_SHAPE(n, in), CT_F32, tu_device, -1, 1, &x1);
  ct_tensor *xt2 = ref_tensor(CT_SHAPE(n, in), CT_F32, tu_device, -1, 1, &x2);
  ct_tensor *gt1 = ref_tensor(CT_SHAPE(n, out), CT_F32, tu_device, -1, 1, &g1);
  ct_tensor *gt2 = ref_tensor(CT_SHAPE(n, out), CT_F32, tu_device, -1, 1, &g2);
  double *w = ref_values(ref_param(m, "weight")->value);
  double dx[24], dxsa[24], dw1[12], dwsa1[12], db1[3], dbsa1[3], dw2[12], dwsa2[12], db2[3], dbsa2[3];
  ref_linear_backward(x1, w, g1, n, in, out, dx, dxsa, dw1, dwsa1, db1, dbsa1);
  ref_linear_backward(x2, w, g2, n, in, out, dx, dxsa, dw2, dwsa2, db2, dbsa2);
  for (int i = 0; i < 12; ++i) dw1[i] += dw2[i], dwsa1[i] += dwsa2[i];
  for (int i = 0; i < 3; ++i) db1[i] += db2[i], dbsa1[i] += dbsa2[i];
  ct_tensor *y = ct_module_forward(m, xt1), *d = y ? ct_module_backward(m, gt1) : NULL;
  TU_CHECK(d);
  ct_free(y), ct_free(d);
  y = ct_module_forward(m, xt2);
  d = y ? ct_module_backward(m, gt2) : NULL;
  TU_CHECK(d);
  ref_assert_sum_close(ref_param(m, "weight")->grad, dw1, dwsa1, 2 * n, "dW after two backward passes");
  ref_assert_sum_close(ref_param(m, "bias")->grad, db1, dbsa1, 2 * n, "db after two backward passes");
  ct_free(y), ct_free(d);
  free(x1), free(x2), free(g1), free(g2), free(w);
  ct_free(xt1), ct_free(xt2), ct_free(gt1), ct_free(gt2);
  ct_module_free(m);
}

static void test_zero_grad(void **state) {
  (void)state;
  ct_module *m = ref_on_device(ct_nn_sequential(3, (ct_module *[]){ct_nn_linear(3, 4, true), ct_nn_relu(),
                                                              ct_nn_linear(4, 2, true)}));
  ct_tensor *x = ct_randn(CT_SHAPE(5, 3), CT_F32, tu_device), *g = ct_ones(CT_SHAPE(5, 2), CT_F32, tu_device);
  TU_CHECK(x);
  TU_CHECK(g);
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  assert_int_equal(np, 4);
  for (int i = 0; i < np; ++i) assert_null(ps[i]->grad); // no backward yet: None, as in torch
  ct_tensor *y = ct_module_forward(m, x), *dx = y ? ct_module_backward(m, g) : NULL;
  TU_CHECK(dx);
  ct_free(y), ct_free(dx);
  for (int i = 0; i < np; ++i) TU_CHECK(ps[i]->grad);
  TU_OK(ct_module_zero_grad(m, false)); // zeros, tensors kept
  for (int i = 0; i < np; ++i) {
    TU_CHECK(ps[i]->grad);
    int64_t k = ct_numel(ps[i]->grad);
    double *z = ref_alloc(k);
    for (int64_t j = 0; j < k; ++j) z[j] = 0;
    tu_assert_close(ps[i]->grad, z, 0, 0, ps[i]->name);
    free(z);
  }
  TU_OK(ct_module_zero_grad(m, true)); // set_to_none
  for (int i = 0; i < np; ++i) assert_null(ps[i]->grad);
  // a backward after set_to_none makes fresh gradients
  y = ct_module_forward(m, x);
  dx = y ? ct_module_backward(m, g) : NULL;
  TU_CHECK(dx);
  for (int i = 0; i < np; ++i) TU_CHECK(ps[i]->grad);
  ct_free(y), ct_free(dx), ct_free(x), ct_free(g);
  ct_module_free(m);
}

// ---- ReLU, Flatten ------------------------------------------------------------------------------
static void test_relu(void **state) {
  (void)state;
  ct_module *m = ref_on_device(ct_nn_relu());
  const int64_t n = 3000;
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(3, n / 3), CT_F32, tu_device, -1, 1, &x);
  ct_tensor *gt = ref_tensor(CT_SHAPE(3, n / 3), CT_F32, tu_device, -1, 1, &g);
  double *y = ref_alloc(n), *dx = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0, dx[i] = x[i] > 0 ? g[i] : 0;
  ct_tensor *yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  tu_assert_close(yt, y, 0, 0, "ReLU forward");
  ct_tensor *dxt = ct_module_backward(m, gt);
  TU_CHECK(dxt);
  tu_assert_close(dxt, dx, 0, 0, "ReLU backward");
  ct_free(dxt);
  // a non-contiguous gradient
  ct_tensor *gT = ct_t(gt), *gc = gT ? ct_contiguous(gT) : NULL, *gv = gc ? ct_t(gc) : NULL;
  TU_CHECK(gv);
  dxt = ct_module_backward(m, gv);
  TU_CHECK(dxt);
  tu_assert_close(dxt, dx, 0, 0, "ReLU backward, transposed grad");
  // eval keeps nothing: backward then fails with a message
  ct_module_train(m, false);
  ct_free(yt);
  yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  assert_null(ct_module_backward(m, gt));
  ref_assert_error(CT_ERR_VALUE, "ReLU backward after eval", "training mode", NULL);
  free(x), free(g), free(y), free(dx);
  ct_free(xt), ct_free(gt), ct_free(yt), ct_free(dxt), ct_free(gT), ct_free(gc), ct_free(gv);
  ct_module_free(m);
}

static void test_flatten(void **state) {
  (void)state;
  ct_module *m = ref_on_device(ct_nn_flatten());
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(2, 3, 4, 5), CT_F32, tu_device, -1, 1, &x);
  ct_tensor *gt = ref_tensor(CT_SHAPE(2, 60), CT_F32, tu_device, -1, 1, &g);
  ct_tensor *yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  ref_assert_shape(yt, CT_SHAPE(2, 60), "Flatten forward");
  tu_assert_close(yt, x, 0, 0, "Flatten forward");
  ct_tensor *dxt = ct_module_backward(m, gt);
  TU_CHECK(dxt);
  ref_assert_shape(dxt, CT_SHAPE(2, 3, 4, 5), "Flatten backward");
  tu_assert_close(dxt, g, 0, 0, "Flatten backward");
  ct_free(yt);
  // a non-contiguous input is copied into row-major order
  ct_tensor *xT = ct_transpose(xt, 1, 3); // (2, 5, 4, 3)
  TU_CHECK(xT);
  yt = ct_module_forward(m, xT);
  TU_CHECK(yt);
  double *ref = ref_alloc(120);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 5; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 3; ++d) ref[((a * 5 + b) * 4 + c) * 3 + d] = x[((a * 3 + d) * 4 + c) * 5 + b];
  tu_assert_close(yt, ref, 0, 0, "Flatten of a transposed input");
  ct_tensor *v = ct_zeros(CT_SHAPE(7), CT_F32, tu_device);
  TU_CHECK(v);
  assert_null(ct_module_forward(m, v));
  ref_assert_error(CT_ERR_SHAPE, "Flatten of a 1-d tensor", "Dimension out of range", NULL);
  free(x), free(g), free(ref);
  ct_free(xt), ct_free(gt), ct_free(yt), ct_free(dxt), ct_free(xT), ct_free(v);
  ct_module_free(m);
}

// ---- Dropout --------------------------------------------------------------------------------------
static void test_dropout(void **state) {
  (void)state;
  const double p = 0.3;
  const int64_t rows = 400, cols = 250, n = rows * cols;
  ct_module *m = ref_on_device(ct_nn_dropout(p));
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(rows, cols), CT_F32, tu_device, 0.5, 2, &x); // never 0
  ct_tensor *gt = ref_tensor(CT_SHAPE(rows, cols), CT_F32, tu_device, -1, 1, &g);
  const uint64_t seed = tu_seed() ^ 0x5eed;
  ct_manual_seed(seed);
  ct_tensor *yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  // The mask is ct_rand's uniforms on this device, kept where u >= p.
  ct_manual_seed(seed);
  ct_tensor *ut = ct_rand(CT_SHAPE(rows, cols), CT_F32, tu_device);
  TU_CHECK(ut);
  double *u = ref_values(ut), *y = ref_values(yt);
  const double scale = (double)(float)(1.0 / (1.0 - p));
  int64_t kept = 0;
  double *ref = ref_alloc(n), *dref = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) {
    bool keep = u[i] >= p;
    kept += keep;
    ref[i] = keep ? (double)(float)(x[i] * scale) : 0.0; // one float32 product, exact in double
    dref[i] = keep ? (double)(float)(g[i] * scale) : 0.0;
    if ((y[i] != 0) != keep) fail_msg("dropout element %lld: kept %d, u %.9g, p %g", (long long)i, (int)keep, u[i], p);
  }
  tu_assert_close(yt, ref, 0, 0, "Dropout forward (scale exactly (float)(1/(1-p)))");
  double sigma = sqrt(p * (1 - p) / (double)n), rate = (double)kept / (double)n;
  if (fabs(rate - (1 - p)) > 5 * sigma)
    fail_msg("dropout keep rate %.5f, expected %.5f +- %.5f (5 sigma)", rate, 1 - p, 5 * sigma);
  ct_tensor *dxt = ct_module_backward(m, gt);
  TU_CHECK(dxt);
  tu_assert_close(dxt, dref, 0, 0, "Dropout backward (the forward's mask)");
  // a second forward draws a new mask
  ct_tensor *y2 = ct_module_forward(m, xt);
  TU_CHECK(y2);
  double *y2v = ref_values(y2);
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += (y2v[i] != 0) == (y[i] != 0);
  assert_true(same < n);
  // eval: the identity
  ct_module_train(m, false);
  ct_tensor *ye = ct_module_forward(m, xt);
  TU_CHECK(ye);
  tu_assert_close(ye, x, 0, 0, "Dropout in eval");
  ct_tensor *de = ct_module_backward(m, gt);
  assert_null(de);
  free(x), free(g), free(u), free(y), free(ref), free(dref), free(y2v);
  ct_free(xt), ct_free(gt), ct_free(yt), ct_free(ut), ct_free(dxt), ct_free(y2), ct_free(ye);
  ct_module_free(m);
}

static void test_dropout_edges(void **state) {
  (void)state;
  double *x;
  ct_tensor *xt = ref_tensor(CT_SHAPE(10, 10), CT_F32, tu_device, -1, 1, &x);
  double zeros[100] = {0};
  // p = 0 in training: the identity, forward and backward
  ct_module *m0 = ref_on_device(ct_nn_dropout(0.0));
  ct_tensor *y = ct_module_forward(m0, xt), *d = y ? ct_module_backward(m0, xt) : NULL;
  TU_CHECK(d);
  tu_assert_close(y, x, 0, 0, "Dropout(0) forward");
  tu_assert_close(d, x, 0, 0, "Dropout(0) backward");
  ct_free(y), ct_free(d);
  // p = 1: zeros, forward and backward
  ct_module *m1 = ref_on_device(ct_nn_dropout(1.0));
  y = ct_module_forward(m1, xt);
  d = y ? ct_module_backward(m1, xt) : NULL;
  TU_CHECK(d);
  tu_assert_close(y, zeros, 0, 0, "Dropout(1) forward");
  tu_assert_close(d, zeros, 0, 0, "Dropout(1) backward");
  ct_free(y), ct_free(d);
  assert_null(ct_nn_dropout(1.5));
  ref_assert_error(CT_ERR_VALUE, "Dropout(1.5)", "dropout probability has to be between 0 and 1, but got 1.5", NULL);
  assert_null(ct_nn_dropout(-0.1));
  free(x);
  ct_free(xt);
  ct_module_free(m0);
  ct_module_free(m1);
}

// ---- Sequential ----------------------------------------------------------------------------------
// Sequential(Linear(6, 5), ReLU(), Linear(5, 4)) against the composed float64 math.
static void test_sequential(void **state) {
  (void)state;
  const int64_t n = 8, a = 6, h = 5, o = 4;
  ct_module *m = ref_on_device(ct_nn_sequential(3, (ct_module *[]){ct_nn_linear(a, h, true), ct_nn_relu(),
                                                              ct_nn_linear(h, o, true)}));
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(n, a), CT_F32, tu_device, -2, 2, &x);
  ct_tensor *gt = ref_tensor(CT_SHAPE(n, o), CT_F32, tu_device, -1, 1, &g);
  double *w0 = ref_values(ref_param(m, "0.weight")->value), *b0 = ref_values(ref_param(m, "0.bias")->value);
  double *w2 = ref_values(ref_param(m, "2.weight")->value), *b2 = ref_values(ref_param(m, "2.bias")->value);
  double z[40], zsa[40], r[40], y[32], ysa[32];
  ref_linear(x, w0, b0, n, a, h, z, zsa);
  for (int i = 0; i < 40; ++i) r[i] = z[i] > 0 ? z[i] : 0;
  ref_linear(r, w2, b2, n, h, o, y, ysa);
  // Two layers deep the float32 errors of the hidden layer pass through the
  // second one: compare with 1e-5 relative and absolute (values are O(1)).
  ct_tensor *yt = ct_module_forward(m, xt);
  TU_CHECK(yt);
  tu_assert_close(yt, y, 1e-5, 1e-5, "Sequential forward");
  double dr[40], drsa[40], dw2[20], dw2sa[20], db2[4], db2sa[4];
  ref_linear_backward(r, w2, g, n, h, o, dr, drsa, dw2, dw2sa, db2, db2sa);
  double dz[40];
  for (int i = 0; i < 40; ++i) dz[i] = z[i] > 0 ? dr[i] : 0;
  double dx[48], dxsa[48], dw0[30], dw0sa[30], db0[5], db0sa[5];
  ref_linear_backward(x, w0, dz, n, a, h, dx, dxsa, dw0, dw0sa, db0, db0sa);
  ct_tensor *dxt = ct_module_backward(m, gt);
  TU_CHECK(dxt);
  tu_assert_close(dxt, dx, 1e-5, 1e-5, "Sequential dx");
  tu_assert_close(ref_param(m, "2.weight")->grad, dw2, 1e-5, 1e-5, "Sequential d 2.weight");
  tu_assert_close(ref_param(m, "2.bias")->grad, db2, 1e-5, 1e-5, "Sequential d 2.bias");
  tu_assert_close(ref_param(m, "0.weight")->grad, dw0, 1e-5, 1e-5, "Sequential d 0.weight");
  tu_assert_close(ref_param(m, "0.bias")->grad, db0, 1e-5, 1e-5, "Sequential d 0.bias");
  free(x), free(g), free(w0), free(b0), free(w2), free(b2);
  ct_free(xt), ct_free(gt), ct_free(yt), ct_free(dxt);
  ct_module_free(m);
  // an empty Sequential is the identity
  ct_module *e = ref_on_device(ct_nn_sequential(0, NULL));
  ct_tensor *one = ct_ones(CT_SHAPE(2), CT_F32, tu_device), *r1 = one ? ct_module_forward(e, one) : NULL;
  TU_CHECK(r1);
  const double ones[2] = {1, 1};
  tu_assert_close(r1, ones, 0, 0, "empty Sequential");
  ct_free(one), ct_free(r1);
  ct_module_free(e);
  // a NULL child (a failed constructor) fails cleanly and frees the others
  assert_null(ct_nn_sequential(2, (ct_module *[]){ct_nn_relu(), ct_nn_dropout(2.0)}));
  ref_assert_error(CT_ERR_VALUE, "Sequential with a NULL child", "NULL module", NULL);
}

// ---- backward without dL/d(input) --------------------------------------------------------------
// ct_module_backward_params (the input needs no grad, as a batch of data)
// must leave every parameter grad exactly as ct_module_backward leaves it:
// the same kernels run in the same order, only the first layer's dL/dx is
// skipped.
static void test_backward_params(void **state) {
  (void)state;
  ct_module *m = ref_on_device(ct_nn_sequential(
      5, (ct_module *[]){ct_nn_conv2d(2, 3, 3, 1, 1, true), ct_nn_relu(), ct_nn_maxpool2d(2, 0),
                         ct_nn_flatten(), ct_nn_linear(3 * 3 * 2, 4, true)}));
  double *x, *g;
  ct_tensor *xt = ref_tensor(CT_SHAPE(5, 2, 6, 4), CT_F32, tu_device, -2, 2, &x); // (N, C, H, W)
  ct_tensor *gt = ref_tensor(CT_SHAPE(5, 4), CT_F32, tu_device, -1, 1, &g);       // dL/dy (N, 4)
  ct_tensor *y = ct_module_forward(m, xt), *dx = y ? ct_module_backward(m, gt) : NULL;
  TU_CHECK(dx);
  int n = 0;
  ct_param **ps = ct_module_parameters(m, &n);
  assert_int_equal(n, 4);
  double *full[4];
  for (int i = 0; i < n; ++i) full[i] = ref_values(ps[i]->grad);
  TU_OK(ct_module_zero_grad(m, true));
  ct_free(y);
  y = ct_module_forward(m, xt);
  TU_CHECK(y);
  TU_OK(ct_module_backward_params(m, gt));
  for (int i = 0; i < n; ++i) {
    TU_CHECK(ps[i]->grad);
    char what[128];
    snprintf(what, sizeof what, "backward_params %s", ps[i]->name);
    tu_assert_close(ps[i]->grad, full[i], 0, 0, what);
    free(full[i]);
  }
  ct_free(y), ct_free(dx);
  ct_module_free(m);
  // a lone Linear: dW = g^T x, db = sum g against float64
  ct_module *l = ref_on_device(ct_nn_linear(3, 2, true));
  ct_tensor *x2 = ct_reshape(xt, CT_SHAPE(80, 3)), *g2 = NULL;
  double *gg;
  g2 = ref_tensor(CT_SHAPE(80, 2), CT_F32, tu_device, -1, 1, &gg);
  TU_CHECK(x2);
  double *w = ref_values(ref_param(l, "weight")->value);
  double dxr[240], dxa[240], dw[6], dwa[6], db[2], dba[2];
  ref_linear_backward(x, w, gg, 80, 3, 2, dxr, dxa, dw, dwa, db, dba);
  y = ct_module_forward(l, x2);
  TU_CHECK(y);
  TU_OK(ct_module_backward_params(l, g2));
  ref_assert_sum_close(ref_param(l, "weight")->grad, dw, dwa, 80, "Linear backward_params dW");
  ref_assert_sum_close(ref_param(l, "bias")->grad, db, dba, 80, "Linear backward_params db");
  ct_free(y);
  // parameterless first layer: nothing to do; errors as backward's
  ct_module *r = ref_on_device(ct_nn_relu());
  TU_OK(ct_module_backward_params(r, g2));
  ct_module *fresh = ref_on_device(ct_nn_linear(3, 2, true));
  assert_int_not_equal(ct_module_backward_params(fresh, g2), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "backward_params before forward", "no saved input", NULL);
  assert_int_not_equal(ct_module_backward_params(NULL, g2), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "backward_params of NULL", "NULL module", NULL);
  ct_module_free(r), ct_module_free(fresh), ct_module_free(l);
  ct_free(x2), ct_free(g2), ct_free(xt), ct_free(gt);
  free(x), free(g), free(gg), free(w);
}

// ---- names, order, .to, state ----------------------------------------------------------------------
static ct_module *nested_model(void) {
  ct_module *inner = ct_nn_sequential(2, (ct_module *[]){ct_nn_linear(2, 2, true), ct_nn_dropout(0.25)});
  return ct_nn_sequential(6, (ct_module *[]){ct_nn_linear(3, 2, true), ct_nn_relu(), inner, ct_nn_flatten(),
                                             ct_nn_dropout(0.0), ct_nn_linear(2, 1, false)});
}

static void test_state_names(void **state) {
  (void)state;
  ct_module *m = nested_model();
  TU_CHECK(m);
  // torch: list(model.state_dict().keys()) of the same structure
  const char *want[] = {"0.weight", "0.bias", "2.0.weight", "2.0.bias", "5.weight"};
  const int64_t numel[] = {6, 2, 4, 2, 2};
  int n = 0;
  ct_param **s = ct_module_state(m, &n);
  assert_int_equal(n, 5);
  for (int i = 0; i < n; ++i) {
    assert_string_equal(s[i]->name, want[i]);
    assert_int_equal(ct_numel(s[i]->value), numel[i]);
    assert_false(s[i]->is_buffer);
  }
  int np = 0;
  ct_param **p = ct_module_parameters(m, &np);
  assert_int_equal(np, 5);
  for (int i = 0; i < np; ++i) assert_ptr_equal(p[i], s[i]);
  assert_int_equal(ct_module_num_elements(m), 16);
  // Linear(784, 256): 784*256 + 256 parameters, as sum(p.numel())
  ct_module *l = ct_nn_linear(784, 256, true);
  TU_CHECK(l);
  assert_int_equal(ct_module_num_elements(l), 784 * 256 + 256);
  s = ct_module_state(l, &n);
  assert_int_equal(n, 2);
  assert_string_equal(s[0]->name, "weight");
  assert_string_equal(s[1]->name, "bias");
  ct_module_free(l);
  ct_module_free(m);
}

static void test_module_str(void **state) {
  (void)state;
  ct_module *m = nested_model();
  TU_CHECK(m);
  char *s = ct_module_str(m);
  TU_CHECK(s);
  // print(model) of the same model in torch 1.13
  assert_string_equal(s, "Sequential(\n"
                         "  (0): Linear(in_features=3, out_features=2, bias=True)\n"
                         "  (1): ReLU()\n"
                         "  (2): Sequential(\n"
                         "    (0): Linear(in_features=2, out_features=2, bias=True)\n"
                         "    (1): Dropout(p=0.25, inplace=False)\n"
                         "  )\n"
                         "  (3): Flatten(start_dim=1, end_dim=-1)\n"
                         "  (4): Dropout(p=0.0, inplace=False)\n"
                         "  (5): Linear(in_features=2, out_features=1, bias=False)\n"
                         ")");
  free(s);
  ct_module_free(m);
  ct_module *mlp = ct_nn_sequential(3, (ct_module *[]){ct_nn_linear(784, 256, true), ct_nn_relu(),
                                                       ct_nn_dropout(0.1)});
  TU_CHECK(mlp);
  s = ct_module_str(mlp);
  TU_CHECK(s);
  assert_string_equal(s, "Sequential(\n  (0): Linear(in_features=784, out_features=256, bias=True)\n"
                         "  (1): ReLU()\n  (2): Dropout(p=0.1, inplace=False)\n)");
  free(s);
  ct_module_free(mlp);
  ct_module *e = ct_nn_sequential(0, NULL);
  TU_CHECK(e);
  s = ct_module_str(e);
  assert_string_equal(s, "Sequential()");
  free(s);
  ct_module_free(e);
}

static void test_to_device(void **state) {
  (void)state;
  ct_module *m = ct_nn_sequential(2, (ct_module *[]){ct_nn_linear(4, 3, true), ct_nn_relu()});
  TU_CHECK(m);
  // gradients on the CPU first
  ct_tensor *x = ct_randn(CT_SHAPE(5, 4), CT_F32, ct_device_cpu()), *g = ct_ones(CT_SHAPE(5, 3), CT_F32, ct_device_cpu());
  ct_tensor *y = ct_module_forward(m, x), *d = y ? ct_module_backward(m, g) : NULL;
  TU_CHECK(d);
  ct_free(y), ct_free(d);
  int n = 0;
  ct_param **s = ct_module_state(m, &n);
  double *before[2], *gbefore[2];
  for (int i = 0; i < n; ++i) before[i] = ref_values(s[i]->value), gbefore[i] = ref_values(s[i]->grad);
  TU_OK(ct_module_to(m, tu_device));
  assert_true(ct_device_eq(ct_module_device(m), tu_device));
  s = ct_module_state(m, &n);
  for (int i = 0; i < n; ++i) {
    assert_true(ct_device_eq(ct_device_of(s[i]->value), tu_device));
    assert_true(ct_device_eq(ct_device_of(s[i]->grad), tu_device));
    tu_assert_close(s[i]->value, before[i], 0, 0, "value after .to");
    tu_assert_close(s[i]->grad, gbefore[i], 0, 0, "grad after .to");
  }
  // runs there; an input left on the other device is refused
  ct_tensor *xd = ct_to_device(x, tu_device);
  TU_CHECK(xd);
  y = ct_module_forward(m, xd);
  TU_CHECK(y);
  assert_true(ct_device_eq(ct_device_of(y), tu_device));
  ct_free(y);
  if (tu_device.type == CT_CUDA) {
    assert_null(ct_module_forward(m, x));
    ref_assert_error(CT_ERR_DEVICE, "input on the cpu, model on cuda", "same device", NULL);
  }
  // and back to the CPU
  TU_OK(ct_module_to(m, ct_device_cpu()));
  s = ct_module_state(m, &n);
  for (int i = 0; i < n; ++i) {
    assert_true(ct_device_eq(ct_device_of(s[i]->value), ct_device_cpu()));
    tu_assert_close(s[i]->value, before[i], 0, 0, "value back on the cpu");
    tu_assert_close(s[i]->grad, gbefore[i], 0, 0, "grad back on the cpu");
    free(before[i]), free(gbefore[i]);
  }
  ct_free(x), ct_free(g), ct_free(xd);
  ct_module_free(m);
}

static ct_module *small_model(void) {
  return ct_nn_sequential(3, (ct_module *[]){ct_nn_linear(3, 2, true), ct_nn_relu(), ct_nn_linear(2, 2, true)});
}

static void test_load_state(void **state) {
  (void)state;
  ct_module *m = ref_on_device(small_model());
  int n = 0;
  ct_param **s = ct_module_state(m, &n);
  assert_int_equal(n, 4);
  double *orig[4];
  for (int i = 0; i < n; ++i) orig[i] = ref_values(s[i]->value);
  // float64 entries on the CPU, in another order: copied, converted, device kept
  ct_named_tensor e[4];
  const char *names[] = {"2.bias", "0.weight", "2.weight", "0.bias"};
  const ct_shape shapes[] = {CT_SHAPE(2), CT_SHAPE(2, 3), CT_SHAPE(2, 2), CT_SHAPE(2)};
  double *vals[4];
  for (int i = 0; i < 4; ++i) {
    snprintf(e[i].name, sizeof e[i].name, "%s", names[i]);
    e[i].tensor = ref_tensor(shapes[i], CT_F64, ct_device_cpu(), -1, 1, &vals[i]);
  }
  TU_OK(ct_module_load_state(m, e, 4, true));
  for (int i = 0; i < 4; ++i) {
    ct_param *p = ref_param(m, names[i]);
    assert_true(ct_device_eq(ct_device_of(p->value), tu_device));
    ref_assert_dtype(p->value, CT_F32, "loaded value");
    double *r = ref_alloc(ct_numel(p->value));
    for (int64_t j = 0; j < ct_numel(p->value); ++j) r[j] = (double)(float)vals[i][j];
    tu_assert_close(p->value, r, 0, 0, names[i]);
    free(r);
  }
  // Missing and unexpected keys: torch's message, and nothing is copied.
  ct_tensor *saved_bias = e[0].tensor, *saved_w = e[1].tensor;
  snprintf(e[0].name, sizeof e[0].name, "foo");
  TU_OK(ct_module_load_state(m, e, 4, false)); // non-strict: ignored
  assert_int_not_equal(ct_module_load_state(m, e, 4, true), 0);
  assert_string_equal(ct_last_error(),
                      "ct_module_load_state: Error(s) in loading state_dict for Sequential:\n"
                      "\tMissing key(s) in state_dict: \"2.bias\". \n"
                      "\tUnexpected key(s) in state_dict: \"foo\". ");
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  // size mismatch: reported in strict and non-strict mode, values untouched
  double *w_before = ref_values(ref_param(m, "0.weight")->value);
  snprintf(e[0].name, sizeof e[0].name, "2.bias");
  ct_tensor *wrong = ct_zeros(CT_SHAPE(3, 2), CT_F32, ct_device_cpu());
  TU_CHECK(wrong);
  e[1].tensor = wrong;
  for (int strict = 0; strict < 2; ++strict) {
    assert_int_not_equal(ct_module_load_state(m, e, 4, strict), 0);
    assert_string_equal(ct_last_error(),
                        "ct_module_load_state: Error(s) in loading state_dict for Sequential:\n"
                        "\tsize mismatch for 0.weight: copying a param with shape (3, 2) from checkpoint, "
                        "the shape in current model is (2, 3).");
    tu_assert_close(ref_param(m, "0.weight")->value, w_before, 0, 0, "0.weight after a failed load");
  }
  // all three at once, in torch's order
  snprintf(e[0].name, sizeof e[0].name, "bar.x");
  assert_int_not_equal(ct_module_load_state(m, e, 4, true), 0);
  assert_string_equal(ct_last_error(),
                      "ct_module_load_state: Error(s) in loading state_dict for Sequential:\n"
                      "\tMissing key(s) in state_dict: \"2.bias\". \n"
                      "\tUnexpected key(s) in state_dict: \"bar.x\". \n"
                      "\tsize mismatch for 0.weight: copying a param with shape (3, 2) from checkpoint, "
                      "the shape in current model is (2, 3).");
  ct_free(wrong);
  e[0].tensor = saved_bias, e[1].tensor = saved_w;
  for (int i = 0; i < 4; ++i) {
    ct_free(e[i].tensor);
    free(vals[i]);
    free(orig[i]);
  }
  free(w_before);
  ct_module_free(m);
}

// torch.nn.Linear's init: U(-1/sqrt(in), 1/sqrt(in)) for W and b, drawn
// from the CPU generator: the same seed gives the same model.
static void test_init(void **state) {
  (void)state;
  const int64_t in = 784, out = 256;
  ct_manual_seed(1234);
  ct_module *m = ct_nn_linear(in, out, true);
  TU_CHECK(m);
  ct_manual_seed(1234);
  ct_module *m2 = ct_nn_linear(in, out, true);
  TU_CHECK(m2);
  double bound = 1.0 / sqrt((double)in);
  const char *names[] = {"weight", "bias"};
  for (int k = 0; k < 2; ++k) {
    ct_tensor *t = ref_param(m, names[k])->value;
    ref_assert_dtype(t, CT_F32, "Linear parameter");
    double *v = ref_values(t), *v2 = ref_values(ref_param(m2, names[k])->value);
    int64_t n = ct_numel(t);
    double mx = 0, mean = 0;
    for (int64_t i = 0; i < n; ++i) {
      // |w| <= bound, up to the float32 rounding of the bound itself
      if (fabs(v[i]) > (double)(float)bound) fail_msg("%s[%lld] = %.9g beyond %.9g", names[k], (long long)i, v[i], bound);
      if (v[i] != v2[i]) fail_msg("%s[%lld] differs between two models of the same seed", names[k], (long long)i);
      mx = fmax(mx, fabs(v[i]));
      mean += v[i];
    }
    mean /= (double)n;
    // uniform on [-b, b]: the max is near b, the mean near 0 (sd b/sqrt(3n))
    assert_true(mx > bound * (1 - 20.0 / (double)n));
    assert_true(fabs(mean) < 5 * bound / sqrt(3.0 * (double)n));
    free(v), free(v2);
  }
  ct_module_free(m);
  ct_module_free(m2);
}

// ---- losses ---------------------------------------------------------------------------------------
static void test_mse(void **state) {
  (void)state;
  const int64_t n = 3 * 40;
  double *p, *t;
  ct_tensor *pt = ref_tensor(CT_SHAPE(3, 40), CT_F32, tu_device, -2, 2, &p);
  ct_tensor *tt = ref_tensor(CT_SHAPE(3, 40), CT_F32, tu_device, -2, 2, &t);
  ct_tensor *grad = NULL;
  ct_tensor *loss = ct_mse_loss(pt, tt, &grad);
  TU_CHECK(loss);
  TU_CHECK(grad);
  ref_assert_shape(loss, CT_SCALAR_SHAPE, "MSE loss");
  double l = 0, la = 0, *g = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) {
    double d = p[i] - t[i];
    l += d * d;
    la += d * d;
    g[i] = 2 * d / (double)n;
  }
  l /= (double)n;
  double tol = 1e-6 * la / (double)n + 1e-7;
  ref_assert_within(loss, &l, &tol, "MSE loss");
  tu_assert_close(grad, g, 4e-7, 1e-9, "MSE gradient");
  ct_free(loss), ct_free(grad);
  loss = ct_mse_loss(pt, tt, NULL); // no gradient asked
  TU_CHECK(loss);
  ref_assert_within(loss, &l, &tol, "MSE loss without gradient");
  ct_tensor *other = ct_zeros(CT_SHAPE(40, 3), CT_F32, tu_device);
  assert_null(ct_mse_loss(pt, other, &grad));
  assert_null(grad);
  ref_assert_error(CT_ERR_SHAPE, "MSE of different shapes", "(3, 40)", "(40, 3)", NULL);
  free(p), free(t), free(g);
  ct_free(pt), ct_free(tt), ct_free(loss), ct_free(other);
}

static void check_cross_entropy(int64_t n, int64_t c, ct_dtype dt, double spread, double offset_row0) {
  int64_t nc = n * c;
  double *x = ref_alloc(nc), *tg = ref_alloc(n);
  ref_random(x, nc, dt, -spread, spread);
  for (int64_t j = 0; j < c; ++j) x[j] = ref_cast(x[j] + offset_row0, dt); // the values stored
  tu_fill_uniform(tg, n, 0, (double)c);
  int64_t *ti = malloc((size_t)n * sizeof *ti);
  for (int64_t i = 0; i < n; ++i) tg[i] = floor(tg[i]), ti[i] = (int64_t)tg[i];
  ct_tensor *xt = tu_from_f64(x, CT_SHAPE(n, c), dt, tu_device);
  ct_tensor *tt = ct_from_host(ti, CT_SHAPE(n), CT_I64, tu_device);
  TU_CHECK(xt);
  TU_CHECK(tt);
  // The reference reads back what was stored rather than trusting the
  // rounding above: GCC 12.2 at -O3 once dropped ref_cast's float rounding
  // of x[8], x[9] in the loop above (a fully peeled, SLP-vectorized loop),
  // which made the reference disagree with the tensor by one float ulp.
  free(x);
  x = ref_values(xt);
  double l = 0, *g = ref_alloc(nc);
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) m = fmax(m, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += exp(x[i * c + j] - m);
    double lse = m + log(s);
    l += lse - x[i * c + ti[i]];
    for (int64_t j = 0; j < c; ++j) g[i * c + j] = (exp(x[i * c + j] - lse) - (j == ti[i])) / (double)n;
  }
  l /= (double)n;
  ct_tensor *grad = NULL, *loss = ct_cross_entropy_loss(xt, tt, &grad);
  TU_CHECK(loss);
  TU_CHECK(grad);
  char what[96];
  snprintf(what, sizeof what, "cross-entropy (%lld, %lld) %s", (long long)n, (long long)c, ct_dtype_name(dt));
  ref_assert_shape(loss, CT_SCALAR_SHAPE, what);
  ref_assert_dtype(loss, dt, what);
  ref_assert_shape(grad, CT_SHAPE(n, c), what);
  // float32: a few ulps of each row's logsumexp (|x| up to spread + offset)
  double eps = dt == CT_F64 ? 1e-14 : 4e-6;
  double tol = eps * (fabs(l) + spread + fabs(offset_row0) / (double)n + log((double)c));
  ref_assert_within(loss, &l, &tol, what);
  tu_assert_close(grad, g, dt == CT_F64 ? 1e-12 : 1e-5, (dt == CT_F64 ? 1e-15 : 1e-7) / (double)n, what);
  free(x), free(tg), free(ti), free(g);
  ct_free(xt), ct_free(tt), ct_free(loss), ct_free(grad);
}

static void test_cross_entropy(void **state) {
  (void)state;
  check_cross_entropy(6, 10, CT_F32, 4, 0);
  check_cross_entropy(6, 10, CT_F32, 4, 1000); // exp(1000) overflows without the max shift
  check_cross_entropy(6, 10, CT_F32, 4, -1000);
  check_cross_entropy(3, 1000, CT_F32, 8, 0);  // rows longer than a warp
  check_cross_entropy(257, 7, CT_F32, 3, 0);   // more rows than a block
  check_cross_entropy(1, 1, CT_F32, 1, 0);
  check_cross_entropy(6, 10, CT_F64, 4, 0);
  check_cross_entropy(6, 10, CT_F64, 4, 1000);
  // no gradient asked
  ct_tensor *x = ct_zeros(CT_SHAPE(2, 4), CT_F32, tu_device);
  int64_t t[2] = {1, 3};
  ct_tensor *tt = ct_from_host(t, CT_SHAPE(2), CT_I64, tu_device);
  ct_tensor *loss = ct_cross_entropy_loss(x, tt, NULL);
  TU_CHECK(loss);
  double l = log(4.0);
  tu_assert_close(loss, &l, 1e-6, 0, "cross-entropy of equal logits is log(C)");
  ct_free(x), ct_free(tt), ct_free(loss);
}

static void test_cross_entropy_errors(void **state) {
  (void)state;
  ct_tensor *x = ct_zeros(CT_SHAPE(3, 10), CT_F32, tu_device);
  TU_CHECK(x);
  const int64_t bad[][3] = {{1, 10, 2}, {-3, 0, 1}, {0, 1, 100}};
  const char *msg[] = {"Target 10 is out of bounds.", "Target -3 is out of bounds.", "Target 100 is out of bounds."};
  for (int k = 0; k < 3; ++k) {
    ct_tensor *t = ct_from_host(bad[k], CT_SHAPE(3), CT_I64, tu_device), *g = NULL;
    TU_CHECK(t);
    if (tu_device.type == CT_CPU) { // at once
      assert_null(ct_cross_entropy_loss(x, t, &g));
      assert_null(g);
      ref_assert_error(CT_ERR_VALUE, "cross-entropy target out of range", msg[k], NULL);
    } else { // on CUDA, at the next call that waits for the device, as torch's device-side assert
      ct_tensor *loss = ct_cross_entropy_loss(x, t, &g);
      TU_CHECK(loss);
      TU_CHECK(g);
      assert_int_not_equal(ct_stream_synchronize(ct_current_stream(tu_device)), CT_OK);
      ref_assert_error(CT_ERR_VALUE, "cross-entropy target out of range, at synchronize", msg[k],
                       "ct_stream_synchronize", NULL);
      TU_OK(ct_stream_synchronize(ct_current_stream(tu_device))); // reported once
      double v = 0;
      TU_OK(ct_item(loss, &v));
      assert_true(isnan(v)); // the bad row's loss is NaN
      ct_free(loss), ct_free(g);
      // through a copy to the host (the chapters read the loss with ct_item)
      loss = ct_cross_entropy_loss(x, t, NULL);
      TU_CHECK(loss);
      assert_int_not_equal(ct_item(loss, &v), CT_OK);
      ref_assert_error(CT_ERR_VALUE, "cross-entropy target out of range, at ct_item", msg[k], "ct_item", NULL);
      TU_OK(ct_cuda_synchronize(tu_device.index));
      ct_free(loss);
      g = NULL;
    }
    ct_free(t);
  }
  const int32_t t32[3] = {0, 1, 2};
  ct_tensor *t = ct_from_host(t32, CT_SHAPE(3), CT_I32, tu_device);
  assert_null(ct_cross_entropy_loss(x, t, NULL));
  ref_assert_error(CT_ERR_DTYPE, "int32 targets", "expected scalar type Long", NULL);
  ct_free(t);
  const int64_t t2[2] = {0, 1};
  t = ct_from_host(t2, CT_SHAPE(2), CT_I64, tu_device);
  assert_null(ct_cross_entropy_loss(x, t, NULL));
  ref_assert_error(CT_ERR_SHAPE, "2 targets for 3 rows", "(3, 10)", "(2,)", NULL);
  ct_free(t), ct_free(x);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_linear_3d),
      cmocka_unit_test(test_grad_accumulation),
      cmocka_unit_test(test_zero_grad),
      cmocka_unit_test(test_relu),
      cmocka_unit_test(test_flatten),
      cmocka_unit_test(test_dropout),
      cmocka_unit_test(test_dropout_edges),
      cmocka_unit_test(test_sequential),
      cmocka_unit_test(test_backward_params),
      cmocka_unit_test(test_state_names),
      cmocka_unit_test(test_module_str),
      cmocka_unit_test(test_to_device),
      cmocka_unit_test(test_load_state),
      cmocka_unit_test(test_init),
      cmocka_unit_test(test_mse),
      cmocka_unit_test(test_cross_entropy),
      cmocka_unit_test(test_cross_entropy_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
