// SPDX-License-Identifier: MIT
//
// test_amp_nn: the modules under autocast, on the device under test.
//
//   Linear and Conv2d under autocast(float16 | bfloat16): y has the autocast
//     dtype and equals the float64 product of the inputs rounded to that
//     dtype (x, W, b as autocast casts them), rounded once; the gradients
//     land in float32 .grad (master weights stay float32) and dx in x's
//     dtype, each within the half-precision rounding of the float64 value;
//   BatchNorm2d takes a half-precision input with float32 statistics; the
//     losses answer float32 under autocast and half precision outside it;
//   MaxPool2d on float16/bfloat16 input: float32's maximum exactly and its
//     dx rounded once;
//   an f16 input to a float32 model outside autocast is a dtype error in
//     PyTorch's words; model.half() converts floating tensors only, and SGD
//     updates float16 parameters with one rounding per torch op;
//   training: 200 steps of a small MLP under autocast (bfloat16; float16
//     with a GradScaler) end within 2% of the float32 run's loss, and a
//     batch holding NaN or a value that overflows float16 is a skipped step
//     that writes nothing into the weights.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

static const ct_dtype lowp[] = {CT_F16, CT_BF16};

static double round_to(double v, ct_dtype dt) { return dt == CT_F16 ? ref_round_f16(v) : ref_round_bf16(v); }

// x's values rounded to dt, as autocast's cast leaves them.
static double *rounded(const ct_tensor *t, ct_dtype dt) {
  double *v = tu_to_f64(t);
  for (int64_t i = 0; i < ct_numel(t); ++i) v[i] = round_to(v[i], dt);
  return v;
}

// |got - ref| <= 2 eps (|ref| + S) + 2^-22 S per element: one rounding to dt
// of the result and of the intermediate half-precision results it sums (S =
// the sum of |terms|), plus float32 accumulation.
static void assert_lowp(const ct_tensor *t, const double *ref, const double *sabs, ct_dtype dt, const char *what) {
  double *got = tu_to_f64(t);
  const double eps = ref_eps(dt);
  for (int64_t i = 0; i < ct_numel(t); ++i) {
    const double tol = 2 * eps * (fabs(ref[i]) + sabs[i]) + ldexp(sabs[i], -22);
    if (!(fabs(got[i] - ref[i]) <= tol))
      fail_msg("%s: element %lld: got %.9g, float64 reference %.9g (tolerance %.3g)", what, (long long)i, got[i],
               ref[i], tol);
  }
  free(got);
}

static ct_tensor *randt(ct_shape s, ct_dtype dt) {
  double *x;
  ct_tensor *t = ref_tensor(s, dt, tu_device, -1, 1, &x);
  free(x);
  TU_CHECK(t);
  return t;
}

// ---- Linear -----------------------------------------------------------------------------------
static void check_linear(ct_dtype dt) {
  enum { N = 6, IN = 37, OUT = 11 };
  ct_module *lin = ct_nn_linear(IN, OUT, true);
  TU_CHECK(lin);
  TU_OK(ct_module_to(lin, tu_device));
  int np = 0;
  ct_param **ps = ct_module_parameters(lin, &np);
  ct_tensor *x = randt(CT_SHAPE(N, IN), CT_F32), *g = randt(CT_SHAPE(N, OUT), CT_F32);
  TU_OK(ct_autocast_enter(tu_device.type, dt, true));
  ct_tensor *y = ct_module_forward(lin, x);
  TU_OK(ct_autocast_exit());
  TU_CHECK(y);
  ref_assert_dtype(y, dt, "Linear under autocast: y");
  ct_tensor *dx = ct_module_backward(lin, g); // outside the region, as PyTorch recommends
  TU_CHECK(dx);
  ref_assert_dtype(dx, CT_F32, "Linear under autocast: dx (x's dtype)");
  ref_assert_dtype(ps[0]->value, CT_F32, "Linear: the master weight");
  ref_assert_dtype(ps[0]->grad, CT_F32, "Linear: weight.grad");
  ref_assert_dtype(ps[1]->grad, CT_F32, "Linear: bias.grad");
  double *xl = rounded(x, dt), *wl = rounded(ps[0]->value, dt), *bl = rounded(ps[1]->value, dt);
  double *gl = rounded(g, dt);
  double yr[N * OUT], ys[N * OUT], dwr[OUT * IN], dws[OUT * IN], dxr[N * IN], dxs[N * IN], dbr[OUT], dbs[OUT];
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OUT; ++o) {
      double acc = bl[o], sa = fabs(bl[o]);
      for (int i = 0; i < IN; ++i) acc += xl[n * IN + i] * wl[o * IN + i], sa += fabs(xl[n * IN + i] * wl[o * IN + i]);
      yr[n * OUT + o] = round_to(acc, dt), ys[n * OUT + o] = sa;
    }
  for (int o = 0; o < OUT; ++o) {
    double acc = 0, sa = 0;
    for (int n = 0; n < N; ++n) acc += gl[n * OUT + o], sa += fabs(gl[n * OUT + o]);
    dbr[o] = acc, dbs[o] = sa;
    for (int i = 0; i < IN; ++i) {
      acc = 0, sa = 0;
      for (int n = 0; n < N; ++n) acc += gl[n * OUT + o] * xl[n * IN + i], sa += fabs(gl[n * OUT + o] * xl[n * IN + i]);
      dwr[o * IN + i] = acc, dws[o * IN + i] = sa;
    }
  }
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < IN; ++i) {
      double acc = 0, sa = 0;
      for (int o = 0; o < OUT; ++o) acc += gl[n * OUT + o] * wl[o * IN + i], sa += fabs(gl[n * OUT + o] * wl[o * IN + i]);
      dxr[n * IN + i] = acc, dxs[n * IN + i] = sa;
    }
  char what[64];
  snprintf(what, sizeof what, "Linear autocast %s y", ct_dtype_name(dt));
  assert_lowp(y, yr, ys, dt, what);
  snprintf(what, sizeof what, "Linear autocast %s weight.grad", ct_dtype_name(dt));
  assert_lowp(ps[0]->grad, dwr, dws, dt, what);
  snprintf(what, sizeof what, "Linear autocast %s bias.grad", ct_dtype_name(dt));
  assert_lowp(ps[1]->grad, dbr, dbs, dt, what);
  snprintf(what, sizeof what, "Linear autocast %s dx", ct_dtype_name(dt));
  assert_lowp(dx, dxr, dxs, dt, what);
  free(xl), free(wl), free(bl), free(gl);
  ct_free(x), ct_free(g), ct_free(y), ct_free(dx);
  ct_module_free(lin);
}

static void test_linear_autocast(void **state) {
  (void)state;
  for (int d = 0; d < 2; ++d) check_linear(lowp[d]);
  // float64 is never cast: a float64 model under autocast stays float64
  ct_module *lin = ct_nn_linear(4, 3, true);
  TU_OK(ct_module_to(lin, tu_device));
  TU_OK(ct_module_to_dtype(lin, CT_F64));
  ct_tensor *x = ct_ones(CT_SHAPE(2, 4), CT_F64, tu_device);
  TU_OK(ct_autocast_enter(tu_device.type, CT_F16, true));
  ct_tensor *y = ct_module_forward(lin, x);
  TU_OK(ct_autocast_exit());
  TU_CHECK(y);
  ref_assert_dtype(y, CT_F64, "float64 Linear under autocast");
  ct_free(x), ct_free(y);
  ct_module_free(lin);
}

// ---- Conv2d -----------------------------------------------------------------------------------
static void check_conv(ct_dtype dt, int stride, int pad) {
  enum { N = 2, C = 3, H = 7, W = 6, CO = 4, K = 3 };
  ct_module *conv = ct_nn_conv2d(C, CO, K, stride, pad, true);
  TU_CHECK(conv);
  TU_OK(ct_module_to(conv, tu_device));
  int np = 0;
  ct_param **ps = ct_module_parameters(conv, &np);
  ct_tensor *x = randt(CT_SHAPE(N, C, H, W), CT_F32);
  TU_OK(ct_autocast_enter(tu_device.type, dt, true));
  ct_tensor *y = ct_module_forward(conv, x);
  TU_OK(ct_autocast_exit());
  TU_CHECK(y);
  ref_assert_dtype(y, dt, "Conv2d under autocast: y");
  const int HO = (int)ct_size(y, 2), WO = (int)ct_size(y, 3);
  ct_tensor *g = randt(ct_shape_of(y), CT_F32);
  ct_tensor *dx = ct_module_backward(conv, g);
  TU_CHECK(dx);
  ref_assert_dtype(dx, CT_F32, "Conv2d under autocast: dx");
  ref_assert_dtype(ps[0]->grad, CT_F32, "Conv2d: weight.grad");
  double *xl = rounded(x, dt), *wl = rounded(ps[0]->value, dt), *bl = rounded(ps[1]->value, dt), *gl = rounded(g, dt);
  const int ny = N * CO * HO * WO, nw = CO * C * K * K, nx = N * C * H * W;
  double *yr = ref_alloc(ny), *ys = ref_alloc(ny), *dwr = ref_alloc(nw), *dws = ref_alloc(nw);
  double *dxr = ref_alloc(nx), *dxs = ref_alloc(nx), dbr[CO], dbs[CO];
  memset(dwr, 0, nw * sizeof(double)), memset(dws, 0, nw * sizeof(double));
  memset(dxr, 0, nx * sizeof(double)), memset(dxs, 0, nx * sizeof(double));
  for (int o = 0; o < CO; ++o) dbr[o] = dbs[o] = 0;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < CO; ++o)
      for (int oh = 0; oh < HO; ++oh)
        for (int ow = 0; ow < WO; ++ow) {
          const int yi = ((n * CO + o) * HO + oh) * WO + ow;
          double acc = bl[o], sa = fabs(bl[o]);
          const double gv = gl[yi];
          dbr[o] += gv, dbs[o] += fabs(gv);
          for (int c = 0; c < C; ++c)
            for (int i = 0; i < K; ++i)
              for (int j = 0; j < K; ++j) {
                const int ih = oh * stride - pad + i, iw = ow * stride - pad + j;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int xi = ((n * C + c) * H + ih) * W + iw, wi = ((o * C + c) * K + i) * K + j;
                acc += xl[xi] * wl[wi], sa += fabs(xl[xi] * wl[wi]);
                dwr[wi] += gv * xl[xi], dws[wi] += fabs(gv * xl[xi]);
                dxr[xi] += gv * wl[wi], dxs[xi] += fabs(gv * wl[wi]);
              }
          yr[yi] = round_to(acc, dt), ys[yi] = sa;
        }
  char what[96];
  snprintf(what, sizeof what, "Conv2d autocast %s stride %d pad %d: y", ct_dtype_name(dt), stride, pad);
  assert_lowp(y, yr, ys, dt, what);
  snprintf(what, sizeof what, "Conv2d autocast %s stride %d pad %d: weight.grad", ct_dtype_name(dt), stride, pad);
  assert_lowp(ps[0]->grad, dwr, dws, dt, what);
  snprintf(what, sizeof what, "Conv2d autocast %s stride %d pad %d: bias.grad", ct_dtype_name(dt), stride, pad);
  assert_lowp(ps[1]->grad, dbr, dbs, dt, what);
  snprintf(what, sizeof what, "Conv2d autocast %s stride %d pad %d: dx", ct_dtype_name(dt), stride, pad);
  assert_lowp(dx, dxr, dxs, dt, what);
  free(xl), free(wl), free(bl), free(gl), free(yr), free(ys), free(dwr), free(dws), free(dxr), free(dxs);
  ct_free(x), ct_free(g), ct_free(y), ct_free(dx);
  ct_module_free(conv);
}

static void test_conv_autocast(void **state) {
  (void)state;
  for (int d = 0; d < 2; ++d) {
    check_conv(lowp[d], 1, 1);
    check_conv(lowp[d], 2, 0);
  }
}

// ---- BatchNorm2d, losses ------------------------------------------------------------------------
static void test_batchnorm_half_input(void **state) {
  (void)state;
  enum { N = 4, C = 3, P = 10 };
  for (int d = 0; d < 2; ++d) {
    const ct_dtype dt = lowp[d];
    ct_module *bn = ct_nn_batchnorm2d(C, 1e-5, 0.1);
    TU_OK(ct_module_to(bn, tu_device));
    double *xv;
    ct_tensor *x = ref_tensor(CT_SHAPE(N, C, 2, 5), dt, tu_device, -2, 3, &xv);
    ct_tensor *y = ct_module_forward(bn, x);
    TU_CHECK(y);
    ref_assert_dtype(y, dt, "BatchNorm2d on a half input: y");
    int ns = 0;
    ct_param **st = ct_module_state(bn, &ns);
    ref_assert_dtype(st[2]->value, CT_F32, "BatchNorm2d: running_mean stays float32");
    double yr[N * C * P], ys[N * C * P], rm[C];
    for (int c = 0; c < C; ++c) {
      double mean = 0, var = 0;
      for (int n = 0; n < N; ++n)
        for (int p = 0; p < P; ++p) mean += xv[(n * C + c) * P + p];
      mean /= N * P;
      for (int n = 0; n < N; ++n)
        for (int p = 0; p < P; ++p) var += pow(xv[(n * C + c) * P + p] - mean, 2);
      var /= N * P;
      rm[c] = 0.1 * mean;
      for (int n = 0; n < N; ++n)
        for (int p = 0; p < P; ++p) {
          const int i = (n * C + c) * P + p;
          yr[i] = round_to((xv[i] - mean) / sqrt(var + 1e-5), dt), ys[i] = 1.0;
        }
    }
    assert_lowp(y, yr, ys, dt, "BatchNorm2d on a half input: y");
    tu_assert_close(st[2]->value, rm, 1e-5, 1e-6, "BatchNorm2d: running_mean from float32 statistics");
    ct_tensor *g = ct_ones(CT_SHAPE(N, C, 2, 5), dt, tu_device);
    ct_tensor *dx = ct_module_backward(bn, g);
    TU_CHECK(dx);
    ref_assert_dtype(dx, dt, "BatchNorm2d on a half input: dx");
    free(xv);
    ct_free(x), ct_free(y), ct_free(g), ct_free(dx);
    ct_module_free(bn);
  }
}

// MaxPool2d on float16/bfloat16 (a Conv2d's output under autocast; pooling
// runs in its input's dtype): the maximum is the float32 module's on the
// widened values, exactly; dx (overlapping windows: sums) is float32's dx
// rounded once; a float32 gradient is cast to the forward's dtype.
static void test_maxpool_half(void **state) {
  (void)state;
  for (int d = 0; d < 2; ++d) {
    const ct_dtype dt = lowp[d];
    ct_module *pool = ct_nn_maxpool2d(3, 2);
    TU_CHECK(pool);
    TU_OK(ct_module_to(pool, tu_device));
    ct_tensor *x = randt(CT_SHAPE(2, 3, 9, 7), dt), *g = randt(CT_SHAPE(2, 3, 4, 3), CT_F32);
    ct_tensor *xw = ct_to_dtype(x, CT_F32), *gr = ct_to_dtype(g, dt), *grw = ct_to_dtype(gr, CT_F32);
    ct_tensor *yw = ct_module_forward(pool, xw), *dxw = ct_module_backward(pool, grw); // float32 reference
    ct_tensor *y = ct_module_forward(pool, x), *dx = ct_module_backward(pool, g);
    TU_CHECK(y);
    TU_CHECK(dx);
    ref_assert_dtype(y, dt, "MaxPool2d half: y");
    ref_assert_dtype(dx, dt, "MaxPool2d half: dx");
    double *a = tu_to_f64(y), *b = tu_to_f64(yw), *c = tu_to_f64(dx), *e = tu_to_f64(dxw);
    for (int64_t i = 0; i < ct_numel(y); ++i)
      if (a[i] != b[i]) fail_msg("MaxPool2d %s: y[%lld] = %g, float32 %g", ct_dtype_name(dt), (long long)i, a[i], b[i]);
    for (int64_t i = 0; i < ct_numel(dx); ++i)
      if (c[i] != round_to(e[i], dt))
        fail_msg("MaxPool2d %s: dx[%lld] = %.9g, float32's rounded %.9g", ct_dtype_name(dt), (long long)i, c[i],
                 round_to(e[i], dt));
    free(a), free(b), free(c), free(e);
    ct_free(x), ct_free(g), ct_free(xw), ct_free(gr), ct_free(grw), ct_free(yw), ct_free(dxw), ct_free(y), ct_free(dx);
    ct_module_free(pool);
  }
}

static void test_losses(void **state) {
  (void)state;
  enum { N = 5, C = 7 };
  for (int d = 0; d < 2; ++d) {
    const ct_dtype dt = lowp[d];
    double *xv;
    ct_tensor *x = ref_tensor(CT_SHAPE(N, C), dt, tu_device, -4, 4, &xv);
    const int64_t tv[N] = {0, 6, 3, 3, 1};
    ct_tensor *t = ct_from_host(tv, CT_SHAPE(N), CT_I64, tu_device);
    double lref = 0, gref[N * C];
    for (int n = 0; n < N; ++n) {
      double mx = -INFINITY, se = 0;
      for (int c = 0; c < C; ++c) mx = fmax(mx, xv[n * C + c]);
      for (int c = 0; c < C; ++c) se += exp(xv[n * C + c] - mx);
      lref += (mx + log(se) - xv[n * C + tv[n]]) / N;
      for (int c = 0; c < C; ++c) gref[n * C + c] = (exp(xv[n * C + c] - mx) / se - (c == tv[n])) / N;
    }
    ct_tensor *grad = NULL;
    TU_OK(ct_autocast_enter(tu_device.type, dt, true));
    ct_tensor *loss = ct_cross_entropy_loss(x, t, &grad); // float32 list: widened, answered in f32
    TU_OK(ct_autocast_exit());
    TU_CHECK(loss);
    ref_assert_dtype(loss, CT_F32, "cross-entropy under autocast: loss");
    ref_assert_dtype(grad, CT_F32, "cross-entropy under autocast: grad");
    tu_assert_close(loss, &lref, 1e-5, 1e-6, "cross-entropy under autocast");
    tu_assert_close(grad, gref, 1e-5, 1e-6, "cross-entropy grad under autocast");
    ct_free(loss), ct_free(grad);
    loss = ct_cross_entropy_loss(x, t, &grad); // outside: a half-precision loss (model.half())
    TU_CHECK(loss);
    ref_assert_dtype(loss, dt, "cross-entropy of half logits: loss");
    ref_assert_dtype(grad, dt, "cross-entropy of half logits: grad");
    double lr = round_to(lref, dt);
    tu_assert_close(loss, &lr, 0, 0, "cross-entropy of half logits: the float32 loss rounded");
    free(xv);
    ct_free(loss), ct_free(grad), ct_free(x), ct_free(t);
  }
}

// ---- dtype errors, model.half(), SGD on float16 ---------------------------------------------------
static void test_half_model(void **state) {
  (void)state;
  ct_module *lin = ct_nn_linear(8, 3, true);
  TU_OK(ct_module_to(lin, tu_device));
  ct_tensor *x16 = randt(CT_SHAPE(4, 8), CT_F16);
  ct_clear_error();
  assert_null(ct_module_forward(lin, x16)); // "match the data types": an f16 batch, an f32 model
  tu_assert_error_contains("mat1 and mat2 must have the same dtype, but got float16 and float32", "f16 input, f32 model");
  TU_OK(ct_autocast_enter(tu_device.type, CT_F16, true)); // autocast casts instead
  ct_tensor *y = ct_module_forward(lin, x16);
  TU_OK(ct_autocast_exit());
  TU_CHECK(y);
  ref_assert_dtype(y, CT_F16, "autocast output");
  ct_free(y);
  // model.half(): floating tensors only
  ct_module *bn = ct_nn_batchnorm2d(3, 1e-5, 0.1);
  TU_CHECK(bn);
  TU_OK(ct_module_to(bn, tu_device)); // both layers on the test's device: a Sequential refuses a mix
  ct_module *mods[2] = {lin, bn};
  ct_module *seq = ct_nn_sequential(2, mods);
  TU_CHECK(seq);
  TU_OK(ct_module_to_dtype(seq, CT_F16));
  int ns = 0;
  ct_param **st = ct_module_state(seq, &ns);
  for (int i = 0; i < ns; ++i)
    ref_assert_dtype(st[i]->value, strcmp(st[i]->name, "1.num_batches_tracked") ? CT_F16 : CT_I64, st[i]->name);
  ct_module_free(seq);
  // SGD on float16 parameters: p + (-lr) * g in float32, rounded to float16 once
  double *pv, *gv;
  ct_param p = {.name = "w"};
  p.value = ref_tensor(CT_SHAPE(64), CT_F16, tu_device, -1, 1, &pv);
  p.grad = ref_tensor(CT_SHAPE(64), CT_F16, tu_device, -1, 1, &gv);
  ct_param *pp = &p;
  ct_optimizer *sgd = ct_optim_sgd(&pp, 1, ct_sgd_defaults(0.1));
  TU_CHECK(sgd);
  TU_OK(ct_optimizer_step(sgd));
  double want[64];
  for (int i = 0; i < 64; ++i) {
    const float upd = (float)((float)-0.1 * (float)gv[i]);
    want[i] = ref_round_f16((double)((float)pv[i] + upd));
  }
  tu_assert_close(p.value, want, 0, 0, "SGD on float16");
  ref_assert_dtype(p.value, CT_F16, "SGD on float16: the parameter stays float16");
  ct_optimizer_free(sgd);
  ct_free(p.value), ct_free(p.grad), ct_free(x16);
  free(pv), free(gv);
}

// ---- training under autocast ------------------------------------------------------------------------
enum { FEAT = 32, HID = 128, CLS = 8, SAMPLES = 512, BATCH = 128, STEPS = 200 };

typedef struct task {
  ct_tensor *x, *y; // the whole data set on the device: (SAMPLES, FEAT) f32, (SAMPLES,) i64
} task;

// A teacher's labels: class = argmax of a fixed random linear map of x.
static task make_task(void) {
  task t;
  ct_manual_seed(1234);
  t.x = ct_randn(CT_SHAPE(SAMPLES, FEAT), CT_F32, tu_device);
  ct_tensor *w = ct_randn(CT_SHAPE(FEAT, CLS), CT_F32, tu_device);
  ct_tensor *s = ct_mm(t.x, w);
  t.y = ct_argmax_dim(s, 1, false);
  TU_CHECK(t.y);
  ct_free(w), ct_free(s);
  return t;
}

static ct_module *make_mlp(void) {
  ct_manual_seed(99);
  ct_module *mods[5] = {ct_nn_linear(FEAT, HID, true), ct_nn_relu(), ct_nn_linear(HID, HID, true), ct_nn_relu(),
                        ct_nn_linear(HID, CLS, true)};
  ct_module *m = ct_nn_sequential(5, mods);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

// The float32 loss of the whole data set (eval, no autocast).
static double full_loss(ct_module *m, const task *t) {
  ct_module_train(m, false);
  ct_tensor *out = ct_module_forward(m, t->x);
  ct_tensor *l = out ? ct_cross_entropy_loss(out, t->y, NULL) : NULL;
  double v = NAN;
  TU_CHECK(l);
  TU_OK(ct_item(l, &v));
  ct_free(out), ct_free(l);
  ct_module_train(m, true);
  return v;
}

// One training step on rows [b0, b0 + BATCH); mode 0: float32, else autocast
// to dt with the scaler s (NULL for bfloat16, as PyTorch needs none there).
static void train_step(ct_module *m, ct_optimizer *opt, ct_grad_scaler *s, const task *t, int64_t b0, ct_dtype dt,
                       const ct_tensor *xb_override) {
  ct_tensor *xb = xb_override ? ct_retain((ct_tensor *)xb_override) : ct_narrow(t->x, 0, b0, BATCH);
  ct_tensor *yb = ct_narrow(t->y, 0, b0, BATCH);
  TU_OK(ct_module_zero_grad(m, true));
  if (dt != CT_F32) TU_OK(ct_autocast_enter(tu_device.type, dt, true));
  ct_tensor *out = ct_module_forward(m, xb), *g = NULL;
  ct_tensor *loss = out ? ct_cross_entropy_loss(out, yb, &g) : NULL;
  if (dt != CT_F32) TU_OK(ct_autocast_exit());
  TU_CHECK(loss);
  ct_tensor *sg = s ? ct_grad_scaler_scale(s, g) : ct_retain(g);
  TU_OK(ct_module_backward_params(m, sg));
  if (s) {
    TU_OK(ct_grad_scaler_step(s, opt));
    TU_OK(ct_grad_scaler_update(s));
  } else {
    TU_OK(ct_optimizer_step(opt));
  }
  ct_free(xb), ct_free(yb), ct_free(out), ct_free(g), ct_free(sg), ct_free(loss);
}

static double train(ct_dtype dt, bool scaler) {
  task t = make_task();
  ct_module *m = make_mlp();
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  ct_sgd_options o = ct_sgd_defaults(0.01); // slow enough that 200 steps end far from zero loss
  o.momentum = 0.9;
  ct_optimizer *opt = ct_optim_sgd(ps, np, o);
  ct_grad_scaler *s = scaler ? ct_grad_scaler_create(tu_device.type, ct_grad_scaler_defaults()) : NULL;
  const double first = full_loss(m, &t);
  for (int k = 0; k < STEPS; ++k) train_step(m, opt, s, &t, (k % (SAMPLES / BATCH)) * BATCH, dt, NULL);
  const double last = full_loss(m, &t);
  int64_t skipped = 0;
  if (s) TU_OK(ct_grad_scaler_skipped_steps(s, &skipped));
  printf("%-9s%s: loss %.5f -> %.5f after %d steps (%lld skipped)\n", ct_dtype_name(dt), scaler ? " + GradScaler" : "",
         first, last, STEPS, (long long)skipped);
  assert_true(last < 0.5 * first); // it trained
  ct_grad_scaler_free(s);
  ct_optimizer_free(opt);
  ct_module_free(m);
  ct_free(t.x), ct_free(t.y);
  return last;
}

static void test_autocast_tracks_f32(void **state) {
  (void)state;
  const double f32 = train(CT_F32, false);
  const double bf16 = train(CT_BF16, false), f16 = train(CT_F16, true);
  if (!(fabs(bf16 - f32) <= 0.02 * f32)) fail_msg("bfloat16 autocast loss %.5f vs float32 %.5f: more than 2%% apart", bf16, f32);
  if (!(fabs(f16 - f32) <= 0.02 * f32)) fail_msg("float16 autocast loss %.5f vs float32 %.5f: more than 2%% apart", f16, f32);
}

// A batch holding NaN, or a value float16 cannot hold (it becomes inf), is a
// skipped step: the scaler counts it and the weights stay bit for bit.
static void test_bad_batch_skipped(void **state) {
  (void)state;
  task t = make_task();
  ct_module *m = make_mlp();
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(0.05));
  ct_grad_scaler *s = ct_grad_scaler_create(tu_device.type, ct_grad_scaler_defaults());
  train_step(m, opt, s, &t, 0, CT_F16, NULL); // the first step may overflow at 2^16: let it settle
  for (int i = 0; i < 8; ++i) train_step(m, opt, s, &t, BATCH, CT_F16, NULL);
  const double bad[2] = {NAN, 1e6}; // 1e6 > 65504: inf in float16
  for (int b = 0; b < 2; ++b) {
    int64_t skipped0, skipped1;
    TU_OK(ct_grad_scaler_skipped_steps(s, &skipped0));
    double *before[16];
    for (int i = 0; i < np; ++i) before[i] = tu_to_f64(ps[i]->value);
    double *xv = tu_to_f64(t.x);
    xv[3 * FEAT + 5] = bad[b];
    ct_tensor *xb = tu_from_f64(xv, CT_SHAPE(BATCH, FEAT), CT_F32, tu_device); // the first BATCH rows
    free(xv);
    train_step(m, opt, s, &t, 0, CT_F16, xb);
    ct_free(xb);
    TU_OK(ct_grad_scaler_skipped_steps(s, &skipped1));
    if (skipped1 != skipped0 + 1) fail_msg("a batch holding %g was not counted as a skipped step", bad[b]);
    for (int i = 0; i < np; ++i) {
      double *after = tu_to_f64(ps[i]->value);
      if (memcmp(after, before[i], (size_t)ct_numel(ps[i]->value) * sizeof(double)) != 0)
        fail_msg("a batch holding %g changed parameter %s", bad[b], ps[i]->name);
      free(after), free(before[i]);
    }
  }
  ct_grad_scaler_free(s);
  ct_optimizer_free(opt);
  ct_module_free(m);
  ct_free(t.x), ct_free(t.y);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_autocast),
      cmocka_unit_test(test_conv_autocast),
      cmocka_unit_test(test_batchnorm_half_input),
      cmocka_unit_test(test_maxpool_half),
      cmocka_unit_test(test_losses),
      cmocka_unit_test(test_half_model),
      cmocka_unit_test(test_autocast_tracks_f32),
      cmocka_unit_test(test_bad_batch_skipped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
