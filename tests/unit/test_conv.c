// SPDX-License-Identifier: MIT
//
// test_conv: Conv2d, MaxPool2d and BatchNorm2d on the device under test.
//
// Invariant checked: every forward and backward equals the float64 math of
// the same inputs and weights written out here as plain loops (direct
// convolution, window scans, the batch-norm formulas), never through the
// runtime's own kernels; the weights are read back from the module. Float32
// results must lie within a tolerance fitted to the sums involved: 2 ulp of
// the result plus (4 sqrt(k) + 4) eps times the sum of the |terms| (k terms),
// as test_matmul's GEMM bound. Sizes are odd, strides 1, 2 and 3, padding
// 0, 1 and 2, pooling windows overlap; batch norm is checked in training
// mode (batch statistics, running statistics after two steps, the counter)
// and in eval mode (running statistics), and its backward against the
// closed-form gradient. Names, state order and print(model) are PyTorch's
// (strings printed by torch 1.13).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

// A random f32 tensor on the device and its values.
static ct_tensor *rand_tensor(ct_shape s, double lo, double hi, double **host) {
  ct_tensor *t = ref_tensor(s, CT_F32, tu_device, lo, hi, host);
  TU_CHECK(t);
  return t;
}

static void set_values(ct_param *p, const double *v) {
  ct_tensor *h = tu_from_f64(v, ct_shape_of(p->value), ct_dtype_of(p->value), ct_device_cpu());
  TU_CHECK(h);
  TU_OK(ct_copy_(p->value, h, false));
  ct_free(h);
}

// ---- Conv2d ------------------------------------------------------------------------------------
typedef struct conv_case {
  int64_t n, cin, h, w, cout;
  int k, s, p;
  bool bias;
} conv_case;

static void check_conv(conv_case c) {
  char what[160];
  snprintf(what, sizeof what, "conv N=%lld C=%lld %lldx%lld -> %lld k=%d s=%d p=%d bias=%d",
           (long long)c.n, (long long)c.cin, (long long)c.h, (long long)c.w, (long long)c.cout,
           c.k, c.s, c.p, (int)c.bias);
  ct_module *m = ref_on_device(ct_nn_conv2d(c.cin, c.cout, c.k, c.s, c.p, c.bias));
  const int64_t ho = (c.h + 2 * c.p - c.k) / c.s + 1, wo = (c.w + 2 * c.p - c.k) / c.s + 1;
  const int64_t K = c.k;
  double *W = ref_values(ref_param(m, "weight")->value);
  double *B = c.bias ? ref_values(ref_param(m, "bias")->value) : NULL;
  double *x, *gy;
  ct_tensor *xt = rand_tensor(CT_SHAPE(c.n, c.cin, c.h, c.w), -1, 1, &x);
  ct_tensor *y = ct_module_forward(m, xt);
  TU_CHECK(y);
  const ct_shape ys = CT_SHAPE(c.n, c.cout, ho, wo);
  if (!ct_shape_eq(ct_shape_of(y), ys)) fail_msg("%s: output shape", what);
  const int64_t ny = c.n * c.cout * ho * wo, nx = c.n * c.cin * c.h * c.w;
  double *yr = ref_alloc(ny), *ya = ref_alloc(ny);
  ct_tensor *gyt = rand_tensor(ys, -1, 1, &gy);
  double *dx = ref_alloc(nx), *dxa = ref_alloc(nx);
  const int64_t nw = c.cout * c.cin * K * K;
  double *dw = ref_alloc(nw), *dwa = ref_alloc(nw), *db = ref_alloc(c.cout), *dba = ref_alloc(c.cout);
  memset(dx, 0, (size_t)nx * 8), memset(dxa, 0, (size_t)nx * 8);
  memset(dw, 0, (size_t)nw * 8), memset(dwa, 0, (size_t)nw * 8);
  memset(db, 0, (size_t)c.cout * 8), memset(dba, 0, (size_t)c.cout * 8);
#define X(n_, ci_, h_, w_) x[(((n_) * c.cin + (ci_)) * c.h + (h_)) * c.w + (w_)]
#define WT(co, ci, i, j) W[(((co) * c.cin + (ci)) * K + (i)) * K + (j)]
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t co = 0; co < c.cout; ++co)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          const int64_t o = ((n * c.cout + co) * ho + oh) * wo + ow;
          double s = B ? B[co] : 0, a = B ? fabs(B[co]) : 0;
          const double g = gy[o];
          db[co] += g, dba[co] += fabs(g);
          for (int64_t ci = 0; ci < c.cin; ++ci)
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < K; ++j) {
                const int64_t ih = oh * c.s - c.p + i, iw = ow * c.s - c.p + j;
                if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
                const double xv = X(n, ci, ih, iw), wv = WT(co, ci, i, j);
                s += wv * xv, a += fabs(wv * xv);
                const int64_t xi = ((n * c.cin + ci) * c.h + ih) * c.w + iw;
                dx[xi] += wv * g, dxa[xi] += fabs(wv * g);
                const int64_t wi = ((co * c.cin + ci) * K + i) * K + j;
                dw[wi] += g * xv, dwa[wi] += fabs(g * xv);
              }
          yr[o] = s, ya[o] = a;
        }
#undef X
#undef WT
  snprintf(what + strlen(what), sizeof what - strlen(what), " forward");
  ref_assert_sum_close(y, yr, ya, c.cin * K * K + 1, what);
  ct_tensor *gx = ct_module_backward(m, gyt);
  TU_CHECK(gx);
  if (!ct_shape_eq(ct_shape_of(gx), ct_shape_of(xt))) fail_msg("%s: dx shape", what);
  ref_assert_sum_close(gx, dx, dxa, c.cout * K * K, "conv dx");
  ref_assert_sum_close(ref_param(m, "weight")->grad, dw, dwa, c.n * ho * wo, "conv dW");
  if (c.bias) ref_assert_sum_close(ref_param(m, "bias")->grad, db, dba, c.n * ho * wo, "conv db");

  // A second forward/backward adds into the gradients (autograd's accumulation).
  ct_tensor *y2 = ct_module_forward(m, xt);
  ct_tensor *gx2 = ct_module_backward(m, gyt);
  TU_CHECK(gx2);
  for (int64_t i = 0; i < nw; ++i) dw[i] *= 2, dwa[i] *= 2;
  ref_assert_sum_close(ref_param(m, "weight")->grad, dw, dwa, c.n * ho * wo, "conv dW accumulated");
  ref_assert_sum_close(gx2, dx, dxa, c.cout * K * K, "conv dx (second backward)");

  // Eval mode: the same output, nothing kept for backward.
  ct_module_train(m, false);
  ct_tensor *y3 = ct_module_forward(m, xt);
  ref_assert_sum_close(y3, yr, ya, c.cin * K * K + 1, "conv eval forward");
  ct_tensor *bad = ct_module_backward(m, gyt);
  if (bad) fail_msg("conv: backward after an eval forward should fail");
  ref_assert_error(CT_ERR_VALUE, "conv backward after eval", "training mode", NULL);

  ct_free(y), ct_free(y2), ct_free(y3), ct_free(gx), ct_free(gx2), ct_free(xt), ct_free(gyt);
  free(W), free(B), free(x), free(gy), free(yr), free(ya), free(dx), free(dxa);
  free(dw), free(dwa), free(db), free(dba);
  ct_module_free(m);
}

static void test_conv_cases(void **state) {
  (void)state;
  const conv_case cases[] = {
      {2, 3, 7, 9, 4, 3, 1, 1, true},  // odd sizes, "same" padding
      {3, 2, 8, 5, 5, 3, 2, 0, true},  // stride 2, no padding
      {2, 1, 6, 7, 3, 5, 2, 2, false}, // 5x5, padding 2, no bias
      {1, 4, 5, 7, 2, 1, 1, 0, true},  // 1x1
      {2, 2, 4, 5, 3, 2, 3, 1, true},  // stride > kernel: skipped pixels
      {2, 3, 3, 3, 2, 3, 1, 0, true},  // a single output pixel
      {5, 8, 12, 10, 16, 3, 1, 1, true},
      // 4.4 MB of f32 columns per image: the CPU runs one image per chunk
      {3, 16, 96, 80, 4, 3, 1, 1, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) check_conv(cases[i]);
}

// ---- MaxPool2d -----------------------------------------------------------------------------------
static void check_pool(int64_t n, int64_t c, int64_t h, int64_t w, int k, int s_arg, const double *xin) {
  const int64_t s = s_arg == 0 ? k : s_arg;
  char what[128];
  snprintf(what, sizeof what, "maxpool (%lld, %lld, %lld, %lld) k=%d s=%d", (long long)n,
           (long long)c, (long long)h, (long long)w, k, s_arg);
  ct_module *m = ref_on_device(ct_nn_maxpool2d(k, s_arg));
  const int64_t ho = (h - k) / s + 1, wo = (w - k) / s + 1, planes = n * c;
  double *x = NULL, *gy;
  ct_tensor *xt;
  if (xin) {
    xt = tu_from_f64(xin, CT_SHAPE(n, c, h, w), CT_F32, tu_device);
    TU_CHECK(xt);
    x = ref_alloc(planes * h * w);
    memcpy(x, xin, (size_t)(planes * h * w) * sizeof(double));
  } else {
    // distinct values (a shuffled ramp), so each window has one maximum
    const int64_t nx = planes * h * w;
    x = ref_alloc(nx);
    double *u = ref_alloc(nx);
    tu_fill_uniform(u, nx, 0, 1);
    for (int64_t i = 0; i < nx; ++i) x[i] = (double)i - nx / 2;
    for (int64_t i = nx - 1; i > 0; --i) { // Fisher-Yates
      int64_t j = (int64_t)(u[i] * (double)(i + 1));
      double t = x[i];
      x[i] = x[j], x[j] = t;
    }
    free(u);
    xt = tu_from_f64(x, CT_SHAPE(n, c, h, w), CT_F32, tu_device);
    TU_CHECK(xt);
  }
  ct_tensor *y = ct_module_forward(m, xt);
  TU_CHECK(y);
  ct_tensor *gyt = rand_tensor(CT_SHAPE(n, c, ho, wo), -1, 1, &gy);
  double *yr = ref_alloc(planes * ho * wo), *dx = ref_alloc(planes * h * w);
  double *dxa = ref_alloc(planes * h * w);
  memset(dx, 0, (size_t)(planes * h * w) * sizeof(double));
  memset(dxa, 0, (size_t)(planes * h * w) * sizeof(double));
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow) {
        // the first maximum; a NaN wins (the last NaN, as torch's scan)
        double best = -INFINITY;
        int64_t at = (oh * s) * w + ow * s;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t pos = (oh * s + i) * w + ow * s + j;
            const double v = x[q * h * w + pos];
            if (v > best || isnan(v)) best = v, at = pos;
          }
        const int64_t o = (q * ho + oh) * wo + ow;
        yr[o] = best;
        dx[q * h * w + at] += gy[o];
        dxa[q * h * w + at] += fabs(gy[o]);
      }
  double *tol0 = ref_alloc(planes * ho * wo);
  for (int64_t i = 0; i < planes * ho * wo; ++i) tol0[i] = 0;
  ref_assert_within(y, yr, tol0, what);
  ct_tensor *gx = ct_module_backward(m, gyt);
  TU_CHECK(gx);
  // each dx sums at most ceil(k/s)^2 gradients
  ref_assert_sum_close(gx, dx, dxa, (k + s - 1) / s * ((k + s - 1) / s), "maxpool dx");
  ct_free(y), ct_free(gx), ct_free(xt), ct_free(gyt);
  free(x), free(gy), free(yr), free(dx), free(dxa), free(tol0);
  ct_module_free(m);
}

static void test_maxpool(void **state) {
  (void)state;
  check_pool(2, 3, 8, 8, 2, 0, NULL);  // the CNN's 2x2 / 2
  check_pool(2, 3, 7, 9, 2, 2, NULL);  // odd sizes: the last row/column dropped (floor)
  check_pool(1, 2, 9, 7, 3, 2, NULL);  // overlapping windows
  check_pool(2, 1, 6, 5, 3, 1, NULL);  // heavy overlap
  check_pool(1, 2, 8, 9, 2, 3, NULL);  // gaps between windows
  check_pool(3, 2, 5, 5, 5, 0, NULL);  // one window per plane
  // ties: the first maximum of each window gets the gradient
  double flat[2 * 6 * 6];
  for (int i = 0; i < 72; ++i) flat[i] = (i / 13) % 2 ? 1.0 : 0.5;
  check_pool(1, 2, 6, 6, 3, 1, flat);
  check_pool(1, 2, 6, 6, 2, 0, flat);
  for (int i = 0; i < 72; ++i) flat[i] = (i % 5) % 2 ? 0.0 : -1.0; // ties inside 2x2 windows
  check_pool(1, 2, 6, 6, 2, 0, flat);
  // NaN propagates as the maximum and takes the gradient; -inf windows
  double sp[1 * 1 * 4 * 4];
  for (int i = 0; i < 16; ++i) sp[i] = i;
  sp[5] = NAN;
  sp[2] = sp[3] = sp[6] = sp[7] = -INFINITY;
  check_pool(1, 1, 4, 4, 2, 2, sp);
}

// ---- BatchNorm2d ---------------------------------------------------------------------------------
// mean, biased var of channel c of x (n, C, P).
static void channel_stats(const double *x, int64_t n, int64_t C, int64_t P, int64_t c, double *mean,
                          double *var) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < P; ++e) s += x[(i * C + c) * P + e];
  const double mu = s / (double)(n * P);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < P; ++e) ss += (x[(i * C + c) * P + e] - mu) * (x[(i * C + c) * P + e] - mu);
  *mean = mu;
  *var = ss / (double)(n * P);
}

static void assert_close_rel(const ct_tensor *t, const double *ref, const double *scale, double k,
                             const char *what) {
  const int64_t n = ct_numel(t);
  double *tol = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) tol[i] = k * ref_eps(CT_F32) * scale[i] + 1e-30;
  ref_assert_within(t, ref, tol, what);
  free(tol);
}

static void test_batchnorm(void **state) {
  (void)state;
  const int64_t N = 4, C = 3, H = 5, W = 3, P = H * W, nx = N * C * P;
  const double eps = 1e-5, mom = 0.1;
  ct_module *m = ref_on_device(ct_nn_batchnorm2d(C, eps, mom));
  double gamma[3] = {1.5, -0.75, 0.25}, beta[3] = {0.1, -2.0, 0.0};
  set_values(ref_param(m, "weight"), gamma);
  set_values(ref_param(m, "bias"), beta);
  double rm[3] = {0, 0, 0}, rv[3] = {1, 1, 1};
  double *x = NULL, *gy = NULL;
  ct_tensor *xt = NULL, *y = NULL;
  double mean[3], var[3];
  for (int step = 0; step < 2; ++step) {
    ct_free(xt), ct_free(y), free(x);
    // channel offsets far from 0 test the two-pass variance
    xt = rand_tensor(CT_SHAPE(N, C, H, W), -1 + 3 * step, 2 + 3 * step, &x);
    y = ct_module_forward(m, xt);
    TU_CHECK(y);
    double *yr = ref_alloc(nx), *sc = ref_alloc(nx);
    for (int64_t c = 0; c < C; ++c) {
      channel_stats(x, N, C, P, c, &mean[c], &var[c]);
      const double is = 1 / sqrt(var[c] + eps);
      rm[c] = (1 - mom) * rm[c] + mom * mean[c];
      rv[c] = (1 - mom) * rv[c] + mom * var[c] * (double)(N * P) / (double)(N * P - 1);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t e = 0; e < P; ++e) {
          const int64_t at = (i * C + c) * P + e;
          yr[at] = (x[at] - mean[c]) * is * gamma[c] + beta[c];
          sc[at] = fabs(yr[at]) + (fabs(x[at]) + fabs(mean[c])) * is * fabs(gamma[c]) + fabs(beta[c]);
        }
    }
    assert_close_rel(y, yr, sc, 8, step ? "bn train forward (step 2)" : "bn train forward");
    const double rs[3] = {fabs(rm[0]) + 1, fabs(rm[1]) + 1, fabs(rm[2]) + 1};
    const double vs[3] = {rv[0], rv[1], rv[2]};
    assert_close_rel(ref_param(m, "running_mean")->value, rm, rs, 8, "bn running_mean");
    assert_close_rel(ref_param(m, "running_var")->value, rv, vs, 8, "bn running_var");
    double nbt = 0;
    TU_OK(ct_item(ref_param(m, "num_batches_tracked")->value, &nbt));
    if (nbt != step + 1) fail_msg("num_batches_tracked %g after %d steps", nbt, step + 1);
    if (ct_dtype_of(ref_param(m, "num_batches_tracked")->value) != CT_I64) fail_msg("counter dtype");
    free(yr), free(sc);
  }
  // backward of the second step: dx through the batch statistics
  ct_tensor *gyt = rand_tensor(CT_SHAPE(N, C, H, W), -1, 1, &gy);
  ct_tensor *gx = ct_module_backward(m, gyt);
  TU_CHECK(gx);
  double *dx = ref_alloc(nx), *dxs = ref_alloc(nx), dg[3], dgs[3], dbt[3], dbs[3];
  for (int64_t c = 0; c < C; ++c) {
    const double is = 1 / sqrt(var[c] + eps), M = (double)(N * P);
    double sg = 0, sgx = 0, sa = 0, sax = 0;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t e = 0; e < P; ++e) {
        const int64_t at = (i * C + c) * P + e;
        const double xh = (x[at] - mean[c]) * is;
        sg += gy[at], sgx += gy[at] * xh, sa += fabs(gy[at]), sax += fabs(gy[at] * xh);
      }
    dbt[c] = sg, dbs[c] = sa;
    dg[c] = sgx, dgs[c] = sax + sa * fabs(mean[c]) * is; // the f32-rounded mean's share
    for (int64_t i = 0; i < N; ++i)
      for (int64_t e = 0; e < P; ++e) {
        const int64_t at = (i * C + c) * P + e;
        const double xh = (x[at] - mean[c]) * is;
        dx[at] = gamma[c] * is * (gy[at] - sg / M - xh * sgx / M);
        dxs[at] = fabs(gamma[c]) * is *
                  (fabs(gy[at]) + sa / M + (fabs(xh) + (fabs(x[at]) + fabs(mean[c])) * is) * sax / M);
      }
  }
  assert_close_rel(gx, dx, dxs, 32, "bn dx");
  assert_close_rel(ref_param(m, "weight")->grad, dg, dgs, 32, "bn dweight");
  assert_close_rel(ref_param(m, "bias")->grad, dbt, dbs, 32, "bn dbias");

  // eval: the running statistics, nothing kept, the counter unchanged
  ct_module_train(m, false);
  ct_tensor *ye = ct_module_forward(m, xt);
  TU_CHECK(ye);
  double *yr = ref_alloc(nx), *sc = ref_alloc(nx);
  double rmf[3], rvf[3];
  double *rmv = ref_values(ref_param(m, "running_mean")->value), *rvv = ref_values(ref_param(m, "running_var")->value);
  for (int c = 0; c < 3; ++c) rmf[c] = rmv[c], rvf[c] = rvv[c];
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t e = 0; e < P; ++e) {
        const int64_t at = (i * C + c) * P + e;
        const double is = 1 / sqrt(rvf[c] + eps);
        yr[at] = (x[at] - rmf[c]) * is * gamma[c] + beta[c];
        sc[at] = fabs(yr[at]) + (fabs(x[at]) + fabs(rmf[c])) * is * fabs(gamma[c]) + fabs(beta[c]);
      }
  assert_close_rel(ye, yr, sc, 8, "bn eval forward");
  double nbt = 0;
  TU_OK(ct_item(ref_param(m, "num_batches_tracked")->value, &nbt));
  if (nbt != 2) fail_msg("num_batches_tracked changed in eval: %g", nbt);
  double *rm2 = ref_values(ref_param(m, "running_mean")->value);
  for (int c = 0; c < 3; ++c)
    if (rm2[c] != rmf[c]) fail_msg("running_mean changed in eval");
  if (ct_module_backward(m, gyt)) fail_msg("bn: backward after an eval forward should fail");
  ct_free(xt), ct_free(y), ct_free(gyt), ct_free(gx), ct_free(ye);
  free(x), free(gy), free(dx), free(dxs), free(yr), free(sc), free(rmv), free(rvv), free(rm2);
  ct_module_free(m);
}

// A CNN block end to end: conv -> bn -> relu -> pool, shapes and that
// gradients reach every parameter.
static void test_block(void **state) {
  (void)state;
  ct_module *mods[4] = {ct_nn_conv2d(1, 8, 3, 1, 1, true), ct_nn_batchnorm2d(8, 1e-5, 0.1),
                        ct_nn_relu(), ct_nn_maxpool2d(2, 0)};
  ct_module *net = ref_on_device(ct_nn_sequential(4, mods));
  double *x, *g;
  ct_tensor *xt = rand_tensor(CT_SHAPE(3, 1, 28, 28), 0, 1, &x);
  ct_tensor *y = ct_module_forward(net, xt);
  TU_CHECK(y);
  if (!ct_shape_eq(ct_shape_of(y), CT_SHAPE(3, 8, 14, 14))) fail_msg("block output shape");
  ct_tensor *gt = rand_tensor(CT_SHAPE(3, 8, 14, 14), -1, 1, &g);
  ct_tensor *dx = ct_module_backward(net, gt);
  TU_CHECK(dx);
  int np = 0;
  ct_param **ps = ct_module_parameters(net, &np);
  if (np != 4) fail_msg("block: %d parameters, expected 4", np);
  for (int i = 0; i < np; ++i) {
    if (!ps[i]->grad) fail_msg("no gradient for %s", ps[i]->name);
    bool fin = false;
    TU_OK(ct_any_nonfinite(ps[i]->grad, &fin));
    if (fin) fail_msg("non-finite gradient for %s", ps[i]->name);
  }
  ct_free(xt), ct_free(y), ct_free(gt), ct_free(dx);
  free(x), free(g);
  ct_module_free(net);
}

// ---- names, init, printing, errors -------------------------------------------------------------
static void test_state_and_print(void **state) {
  (void)state;
  ct_module *mods[8] = {ct_nn_conv2d(1, 32, 3, 1, 1, true), ct_nn_batchnorm2d(32, 1e-5, 0.1),
                        ct_nn_relu(), ct_nn_maxpool2d(2, 0),
                        ct_nn_conv2d(32, 64, 5, 2, 0, false), ct_nn_batchnorm2d(64, 1e-3, 0.01),
                        ct_nn_maxpool2d(3, 2), ct_nn_conv2d(64, 8, 1, 1, 2, true)};
  ct_module *net = ct_nn_sequential(8, mods);
  TU_CHECK(net);
  static const char *want =
      "Sequential(\n"
      "  (0): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
      "  (1): BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (2): ReLU()\n"
      "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (4): Conv2d(32, 64, kernel_size=(5, 5), stride=(2, 2), bias=False)\n"
      "  (5): BatchNorm2d(64, eps=0.001, momentum=0.01, affine=True, track_running_stats=True)\n"
      "  (6): MaxPool2d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (7): Conv2d(64, 8, kernel_size=(1, 1), stride=(1, 1), padding=(2, 2))\n"
      ")";
  char *s = ct_module_str(net);
  TU_CHECK(s);
  if (strcmp(s, want)) fail_msg("print(model):\n%s\nexpected:\n%s", s, want);
  free(s);
  static const char *names[] = {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                "1.running_var", "1.num_batches_tracked", "4.weight", "5.weight",
                                "5.bias", "5.running_mean", "5.running_var",
                                "5.num_batches_tracked", "7.weight", "7.bias"};
  int n = 0;
  ct_param **st = ct_module_state(net, &n);
  if (n != 15) fail_msg("state_dict has %d entries, expected 15", n);
  for (int i = 0; i < n; ++i)
    if (strcmp(st[i]->name, names[i])) fail_msg("state entry %d is %s, expected %s", i, st[i]->name, names[i]);
  int np = 0;
  ct_module_parameters(net, &np);
  if (np != 9) fail_msg("%d parameters, expected 9", np);
  // init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), spread over the range
  double *w = ref_values(st[7]->value); // 4.weight (64, 32, 5, 5): fan_in 800
  const double bound = 1 / sqrt(800.0);
  double lo = 1, hi = -1;
  for (int64_t i = 0; i < 64 * 32 * 25; ++i) lo = fmin(lo, w[i]), hi = fmax(hi, w[i]);
  if (lo < -bound || hi > bound || lo > -0.95 * bound || hi < 0.95 * bound)
    fail_msg("conv init range [%g, %g], bound %g", lo, hi, bound);
  free(w);
  double *bw = ref_values(st[2]->value), *rv = ref_values(st[5]->value), *rm = ref_values(st[4]->value);
  for (int i = 0; i < 32; ++i)
    if (bw[i] != 1 || rv[i] != 1 || rm[i] != 0) fail_msg("batchnorm init");
  free(bw), free(rv), free(rm);
  if (ct_ndim(st[6]->value) != 0 || ct_dtype_of(st[6]->value) != CT_I64) fail_msg("num_batches_tracked: 0-d int64");
  if (!st[6]->is_buffer || !st[4]->is_buffer || st[2]->is_buffer) fail_msg("buffer flags");
  ct_module_free(net);
}

static void test_errors(void **state) {
  (void)state;
  if (ct_nn_conv2d(0, 3, 3, 1, 0, true)) fail_msg("conv with 0 channels");
  ref_assert_error(CT_ERR_VALUE, "conv args", "ct_nn_conv2d", NULL);
  if (ct_nn_conv2d(1, 3, 3, 0, 0, true)) fail_msg("conv with stride 0");
  if (ct_nn_maxpool2d(0, 0)) fail_msg("pool with kernel 0");
  if (ct_nn_batchnorm2d(0, 1e-5, 0.1)) fail_msg("bn with 0 features");
  ct_module *conv = ref_on_device(ct_nn_conv2d(3, 4, 3, 1, 0, true));
  ct_tensor *x = ct_zeros(CT_SHAPE(2, 2, 5, 5), CT_F32, tu_device);
  if (ct_module_forward(conv, x)) fail_msg("conv accepted 2 channels for 3");
  ref_assert_error(CT_ERR_SHAPE, "conv channels", "3 channels", "got 2 channels", NULL);
  ct_free(x);
  x = ct_zeros(CT_SHAPE(2, 3, 2, 5), CT_F32, tu_device);
  if (ct_module_forward(conv, x)) fail_msg("conv accepted an input smaller than its kernel");
  ref_assert_error(CT_ERR_SHAPE, "conv too small", "Kernel size", NULL);
  ct_free(x);
  x = ct_zeros(CT_SHAPE(3, 5, 5), CT_F32, tu_device);
  if (ct_module_forward(conv, x)) fail_msg("conv accepted a 3-D input");
  ct_free(x);
  x = ct_zeros(CT_SHAPE(1, 3, 5, 5), CT_F64, tu_device);
  if (ct_module_forward(conv, x)) fail_msg("conv accepted float64 input with float32 weights");
  ref_assert_error(CT_ERR_DTYPE, "conv dtype", "dtype", NULL);
  ct_free(x);
  ct_tensor *g = ct_zeros(CT_SHAPE(1, 4, 3, 3), CT_F32, tu_device);
  if (ct_module_backward(conv, g)) fail_msg("conv backward without forward");
  ref_assert_error(CT_ERR_VALUE, "conv backward first", "forward", NULL);
  x = ct_zeros(CT_SHAPE(1, 3, 5, 5), CT_F32, tu_device);
  ct_tensor *y = ct_module_forward(conv, x);
  TU_CHECK(y);
  ct_tensor *g2 = ct_zeros(CT_SHAPE(1, 4, 2, 3), CT_F32, tu_device);
  if (ct_module_backward(conv, g2)) fail_msg("conv backward with a wrong gradient shape");
  ref_assert_error(CT_ERR_SHAPE, "conv grad shape", "(1, 4, 3, 3)", NULL);
  ct_free(y), ct_free(g), ct_free(g2), ct_free(x);
  ct_module_free(conv);

  ct_module *pool = ref_on_device(ct_nn_maxpool2d(3, 0));
  x = ct_zeros(CT_SHAPE(1, 1, 2, 4), CT_F32, tu_device);
  if (ct_module_forward(pool, x)) fail_msg("pool accepted an input smaller than its window");
  ct_free(x);
  ct_module_free(pool);

  ct_module *bn = ref_on_device(ct_nn_batchnorm2d(3, 1e-5, 0.1));
  x = ct_zeros(CT_SHAPE(1, 3, 1, 1), CT_F32, tu_device);
  if (ct_module_forward(bn, x)) fail_msg("bn trained on one value per channel");
  ref_assert_error(CT_ERR_VALUE, "bn one value", "more than 1 value per channel", NULL);
  ct_module_train(bn, false);
  y = ct_module_forward(bn, x); // eval: fine
  TU_CHECK(y);
  ct_free(y), ct_free(x);
  x = ct_zeros(CT_SHAPE(2, 4, 3, 3), CT_F32, tu_device);
  if (ct_module_forward(bn, x)) fail_msg("bn accepted 4 channels for 3");
  ct_free(x);
  ct_module_free(bn);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_cases),
      cmocka_unit_test(test_maxpool),
      cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_block),
      cmocka_unit_test(test_state_and_print),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
