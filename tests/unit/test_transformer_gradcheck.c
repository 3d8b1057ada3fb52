// SPDX-License-Identifier: MIT
//
// test_transformer_gradcheck: the backward passes of the transformer layers
// (Embedding, LayerNorm, GELU both ways, Softmax, CausalSelfAttention, the
// LM cross-entropy with ignored rows, a Linear tied to an Embedding, and a
// whole GPT block) against central finite differences, in float64 on the
// CPU.
//
// Invariant checked: for L(x, params) = sum(y * R) with a fixed random R (for
// the loss and the GPT block, L is the loss itself), the gradient that
// backward returns (dL/dx) and accumulates (dL/dparam) equals the five-point
// difference (L(v-2h) - 8L(v-h) + 8L(v+h) - L(v+2h)) / 12h, h = 1e-4, for
// every element v of the input and of every parameter, to a relative error
// below 1e-6: each error is divided by max(|numeric|, 1e-3 * the largest
// |numeric| of that tensor or of any checked tensor), so near-zero entries
// are judged on the scale of the check, not against rounding noise (the
// scheme of test_conv_gradcheck). Truncation is O(h^4), rounding about
// 1e-16 |L| / h, both far under 1e-6. None of these functions has a kink:
// GELU, softmax, layer norm and the cross-entropy are smooth, the causal
// mask is fixed by position, the max shift of a softmax does not change its
// value, and an Embedding's lookup is linear in its weight; the indices are
// not perturbed. The modules are built in float32 and converted to float64,
// the dtype the runtime's f64 path exists for. On CUDA the test is skipped
// (exit 77): the CUDA kernels are checked against PyTorch by
// test_transformer_torch and on the host by crossdev.kernels_host.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_gpt.h"
#include "tu_ref.h"

static const double H = 1e-4;

// Converts every floating parameter and buffer of m to float64 (tied names
// follow their parameter at the next ct_module_state).
static void to_f64(ct_module *m) {
  int n = 0;
  ct_param **st = ct_module_state(m, &n);
  for (int i = 0; i < n; ++i) {
    if (!ct_dtype_is_floating(ct_dtype_of(st[i]->value))) continue;
    ct_tensor *v = ct_to_dtype(st[i]->value, CT_F64);
    TU_CHECK(v);
    ct_free(st[i]->value);
    st[i]->value = v;
  }
  (void)ct_module_state(m, &n); // re-point the tied names
}

// ---- the checker ------------------------------------------------------------------------------
typedef double (*objective_fn)(void *ctx);

typedef struct checked {
  char name[96];
  double *v;         // the variable's data (a CPU f64 tensor), perturbed in place
  const double *ana; // what backward gave
  int64_t n;
} checked;

// Fails unless every analytic gradient matches its five-point difference.
static void check_all(const char *what, objective_fn L, void *ctx, checked *c, int nc) {
  double **num = calloc((size_t)nc, sizeof *num), scale = 0;
  for (int k = 0; k < nc; ++k) {
    num[k] = ref_alloc(c[k].n);
    for (int64_t i = 0; i < c[k].n; ++i) {
      const double keep = c[k].v[i];
      double l[4];
      const double at[4] = {-2 * H, -H, H, 2 * H};
      for (int s = 0; s < 4; ++s) {
        c[k].v[i] = keep + at[s];
        l[s] = L(ctx);
      }
      c[k].v[i] = keep;
      num[k][i] = (l[0] - 8 * l[1] + 8 * l[2] - l[3]) / (12 * H);
      scale = fmax(scale, fabs(num[k][i]));
    }
  }
  double worst_all = 0;
  for (int k = 0; k < nc; ++k) {
    double big = 0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < c[k].n; ++i) big = fmax(big, fabs(num[k][i]));
    const double floor = 1e-3 * fmax(big, scale) + 1e-300;
    for (int64_t i = 0; i < c[k].n; ++i) {
      const double e = fabs(c[k].ana[i] - num[k][i]) / fmax(fabs(num[k][i]), floor);
      if (e > worst) worst = e, at = i;
    }
    if (!(worst < 1e-6))
      fail_msg("%s dL/d%s: relative error %.3g at element %lld: backward %.17g, finite differences %.17g", what,
               c[k].name, worst, (long long)at, c[k].ana[at], num[k][at]);
    worst_all = fmax(worst_all, worst);
    free(num[k]);
  }
  free(num);
  printf("  %-40s largest relative error %.2g\n", what, worst_all);
}

// Appends m's parameters (grads from the last backward) to c.
static int add_params(ct_module *m, checked *c, int nc, const char *prefix) {
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  for (int i = 0; i < np; ++i) {
    if (!ps[i]->grad) fail_msg("no gradient for %s", ps[i]->name);
    if (ct_dtype_of(ps[i]->grad) != CT_F64) fail_msg("%s's grad is %s", ps[i]->name, ct_dtype_name(ct_dtype_of(ps[i]->grad)));
    snprintf(c[nc].name, sizeof c[nc].name, "%s%s", prefix, ps[i]->name);
    c[nc].v = ct_data_ptr(ps[i]->value);
    c[nc].ana = ct_data_ptr(ps[i]->grad);
    c[nc].n = ct_numel(ps[i]->value);
    ++nc;
  }
  return nc;
}

// ---- one module: L = sum(forward(x) * R) -------------------------------------------------------
typedef struct module_case {
  ct_module *m;
  ct_tensor *x;
  double *r;
} module_case;

static double module_objective(void *ctx) {
  module_case *mc = ctx;
  ct_tensor *y = ct_module_forward(mc->m, mc->x);
  TU_CHECK(y);
  const double *yv = ct_data_ptr(y);
  double s = 0;
  for (int64_t i = 0; i < ct_numel(y); ++i) s += yv[i] * mc->r[i];
  ct_free(y);
  return s;
}

// x: a float64 input (checked too when with_dx), or int64 indices.
static void gradcheck_module(ct_module *m, ct_tensor *x, bool with_dx, const char *what) {
  module_case mc = {m, x, NULL};
  ct_tensor *y = ct_module_forward(m, x);
  TU_CHECK(y);
  const int64_t ny = ct_numel(y);
  mc.r = ref_alloc(ny);
  tu_fill_uniform(mc.r, ny, -1, 1);
  ct_tensor *rt = tu_from_f64(mc.r, ct_shape_of(y), CT_F64, ct_device_cpu());
  TU_CHECK(rt);
  TU_OK(ct_module_zero_grad(m, true));
  ct_tensor *dx = NULL;
  if (with_dx) TU_CHECK(dx = ct_module_backward(m, rt));
  else TU_OK(ct_module_backward_params(m, rt));
  checked c[16];
  int nc = 0;
  if (with_dx) {
    if (ct_dtype_of(dx) != CT_F64) fail_msg("%s: dx is %s", what, ct_dtype_name(ct_dtype_of(dx)));
    snprintf(c[0].name, sizeof c[0].name, "x");
    c[0].v = ct_data_ptr(x), c[0].ana = ct_data_ptr(dx), c[0].n = ct_numel(x);
    nc = 1;
  }
  nc = add_params(m, c, nc, "");
  check_all(what, module_objective, &mc, c, nc);
  ct_free(y), ct_free(rt), ct_free(dx);
  free(mc.r);
}

static ct_tensor *f64_input(ct_shape s, double lo, double hi) {
  const int64_t n = ct_shape_numel(s);
  double *v = ref_alloc(n);
  tu_fill_uniform(v, n, lo, hi);
  ct_tensor *t = tu_from_f64(v, s, CT_F64, ct_device_cpu());
  TU_CHECK(t);
  free(v);
  return t;
}

// Indices in [0, v) with every value of `must` present (repeats guaranteed when n > v).
static ct_tensor *indices(ct_shape s, int64_t v) {
  const int64_t n = ct_shape_numel(s);
  double *u = ref_alloc(n);
  tu_fill_uniform(u, n, 0, 1);
  int64_t *k = malloc((size_t)n * sizeof *k);
  for (int64_t i = 0; i < n; ++i) k[i] = i < v ? (v - 1 - i) : (int64_t)(u[i] * (double)v) % v;
  ct_tensor *t = ct_from_host(k, s, CT_I64, ct_device_cpu());
  TU_CHECK(t);
  free(u), free(k);
  return t;
}

// Sets every floating parameter to U(lo, hi): weights and biases away from their defaults.
static void randomize(ct_module *m, double lo, double hi) {
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  for (int i = 0; i < np; ++i) tu_fill_uniform(ct_data_ptr(ps[i]->value), ct_numel(ps[i]->value), lo, hi);
}

static void test_embedding(void **state) {
  (void)state;
  ct_module *m = ct_nn_embedding(7, 5);
  TU_CHECK(m);
  to_f64(m);
  ct_tensor *idx = indices(CT_SHAPE(3, 4), 7); // 12 positions over 7 rows: repeats
  gradcheck_module(m, idx, false, "Embedding(7, 5)");
  ct_free(idx);
  ct_module_free(m);
}

static void test_layernorm(void **state) {
  (void)state;
  ct_module *m = ct_nn_layernorm(6, 1e-5);
  TU_CHECK(m);
  to_f64(m);
  randomize(m, 0.5, 1.5);
  ct_tensor *x = f64_input(CT_SHAPE(2, 3, 6), -2, 2);
  gradcheck_module(m, x, true, "LayerNorm((6,))");
  ct_free(x);
  ct_module_free(m);
}

static void test_gelu(void **state) {
  (void)state;
  for (int ta = 0; ta < 2; ++ta) {
    ct_module *m = ct_nn_gelu(ta);
    TU_CHECK(m);
    ct_tensor *x = f64_input(CT_SHAPE(5, 8), -4, 4);
    gradcheck_module(m, x, true, ta ? "GELU(approximate='tanh')" : "GELU(approximate='none')");
    ct_free(x);
    ct_module_free(m);
  }
}

static void test_softmax(void **state) {
  (void)state;
  ct_module *m = ct_nn_softmax(-1);
  TU_CHECK(m);
  ct_tensor *x = f64_input(CT_SHAPE(3, 4, 5), -3, 3);
  gradcheck_module(m, x, true, "Softmax(dim=-1)");
  ct_free(x);
  ct_module_free(m);
}

static void test_attention(void **state) {
  (void)state;
  const struct { int64_t b, t, c, nh; bool bias; } cases[] = {{2, 5, 8, 2, true}, {1, 4, 6, 1, false}, {2, 1, 4, 4, true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    ct_module *m = ct_nn_causal_self_attention(cases[i].c, cases[i].nh, cases[i].bias);
    TU_CHECK(m);
    to_f64(m);
    randomize(m, -0.6, 0.6);
    ct_tensor *x = f64_input(CT_SHAPE(cases[i].b, cases[i].t, cases[i].c), -1.5, 1.5);
    char what[96];
    snprintf(what, sizeof what, "CausalSelfAttention B=%lld T=%lld C=%lld nh=%lld", (long long)cases[i].b,
             (long long)cases[i].t, (long long)cases[i].c, (long long)cases[i].nh);
    gradcheck_module(m, x, true, what);
    ct_free(x);
    ct_module_free(m);
  }
}

// ---- the loss ------------------------------------------------------------------------------------------
typedef struct ce_case {
  ct_tensor *logits, *target;
} ce_case;

static double ce_objective(void *ctx) {
  ce_case *cc = ctx;
  ct_tensor *l = ct_cross_entropy(cc->logits, cc->target, -100, NULL);
  TU_CHECK(l);
  double v = 0;
  TU_OK(ct_item(l, &v));
  ct_free(l);
  return v;
}

static void test_cross_entropy(void **state) {
  (void)state;
  ce_case cc = {f64_input(CT_SHAPE(2, 4, 6), -3, 3), NULL};
  const int64_t t[8] = {0, 5, -100, 3, 2, -100, 1, 4}; // two ignored rows
  TU_CHECK(cc.target = ct_from_host(t, CT_SHAPE(2, 4), CT_I64, ct_device_cpu()));
  double *lv = ct_data_ptr(cc.logits);
  for (int j = 0; j < 6; ++j) lv[6 + j] += 50; // a shifted row: the max shift keeps it finite
  ct_tensor *g = NULL;
  ct_tensor *loss = ct_cross_entropy(cc.logits, cc.target, -100, &g);
  TU_CHECK(loss);
  TU_CHECK(g);
  const double *gv = ct_data_ptr(g);
  for (int j = 0; j < 6; ++j)
    if (gv[2 * 6 + j] != 0 || gv[5 * 6 + j] != 0) fail_msg("an ignored row's gradient is not 0");
  checked c = {"logits", ct_data_ptr(cc.logits), gv, ct_numel(cc.logits)};
  check_all("cross_entropy(ignore_index=-100)", ce_objective, &cc, &c, 1);
  ct_free(loss), ct_free(g), ct_free(cc.logits), ct_free(cc.target);
}

// ---- a Linear tied to an Embedding: both uses add into one grad ------------------------------------------
typedef struct tied_case {
  ct_module *emb, *head;
  ct_tensor *idx;
  double *r;
} tied_case;

static double tied_objective(void *ctx) {
  tied_case *tc = ctx;
  ct_tensor *e = ct_module_forward(tc->emb, tc->idx);
  TU_CHECK(e);
  ct_tensor *y = ct_module_forward(tc->head, e);
  TU_CHECK(y);
  const double *yv = ct_data_ptr(y);
  double s = 0;
  for (int64_t i = 0; i < ct_numel(y); ++i) s += yv[i] * tc->r[i];
  ct_free(e), ct_free(y);
  return s;
}

static void test_tied(void **state) {
  (void)state;
  ct_module *mods[2] = {ct_nn_embedding(6, 4), ct_nn_linear(4, 6, false)};
  static const char *const names[2] = {"wte", "lm_head"};
  ct_module *root = ct_nn_module_dict(2, names, mods);
  TU_CHECK(root);
  tied_case tc = {mods[0], mods[1], indices(CT_SHAPE(2, 5), 6), NULL};
  TU_OK(ct_module_tie(tc.head, "weight", tc.emb, "weight"));
  to_f64(root);
  int np = 0;
  (void)ct_module_parameters(root, &np);
  if (np != 1) fail_msg("a tied pair has %d parameters, expected 1", np);
  tc.r = ref_alloc(2 * 5 * 6);
  tu_fill_uniform(tc.r, 2 * 5 * 6, -1, 1);
  ct_tensor *e = ct_module_forward(tc.emb, tc.idx), *y = e ? ct_module_forward(tc.head, e) : NULL;
  TU_CHECK(y);
  ct_tensor *rt = tu_from_f64(tc.r, ct_shape_of(y), CT_F64, ct_device_cpu());
  TU_CHECK(rt);
  ct_tensor *de = ct_module_backward(tc.head, rt);
  TU_CHECK(de);
  TU_OK(ct_module_backward_params(tc.emb, de));
  checked c[2];
  const int nc = add_params(root, c, 0, "");
  check_all("lm_head tied to wte", tied_objective, &tc, c, nc);
  ct_free(e), ct_free(y), ct_free(rt), ct_free(de), ct_free(tc.idx);
  free(tc.r);
  ct_module_free(root);
}

// ---- a GPT block, end to end ------------------------------------------------------------------------
typedef struct gpt_case {
  tu_gpt g;
  ct_tensor *idx, *targets;
} gpt_case;

static double gpt_objective(void *ctx) {
  gpt_case *gc = ctx;
  ct_tensor *loss = NULL, *dl = NULL;
  ct_tensor *logits = tu_gpt_forward(&gc->g, gc->idx, gc->targets, &loss, &dl);
  double v = 0;
  TU_OK(ct_item(loss, &v));
  ct_free(logits), ct_free(loss), ct_free(dl);
  return v;
}

static void test_gpt_block(void **state) {
  (void)state;
  gpt_case gc;
  tu_gpt_init(&gc.g, 11, 5, 8, 2);
  to_f64(gc.g.root);
  int ns = 0;
  ct_param **st = ct_module_state(gc.g.root, &ns);
  for (int i = 0; i < ns; ++i) // non-trivial norms and biases; small embeddings
    if (strstr(st[i]->name, "ln_")) tu_fill_uniform(ct_data_ptr(st[i]->value), ct_numel(st[i]->value), 0.5, 1.5);
  gc.idx = indices(CT_SHAPE(2, 5), 11);
  const int64_t t[10] = {3, 1, 4, 1, 5, 9, 2, -100, 5, 10};
  TU_CHECK(gc.targets = ct_from_host(t, CT_SHAPE(2, 5), CT_I64, ct_device_cpu()));
  ct_tensor *loss = NULL, *dl = NULL;
  ct_tensor *logits = tu_gpt_forward(&gc.g, gc.idx, gc.targets, &loss, &dl);
  TU_OK(ct_module_zero_grad(gc.g.root, true));
  tu_gpt_backward(&gc.g, dl);
  checked c[24];
  const int nc = add_params(gc.g.root, c, 0, "");
  check_all("GPT block (tied lm_head)", gpt_objective, &gc, c, nc);
  ct_free(logits), ct_free(loss), ct_free(dl), ct_free(gc.idx), ct_free(gc.targets);
  ct_module_free(gc.g.root);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (tu_device.type != CT_CPU) {
    printf("skipped: the float64 finite-difference check runs on the CPU\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedding),     cmocka_unit_test(test_layernorm), cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_softmax),       cmocka_unit_test(test_attention), cmocka_unit_test(test_cross_entropy),
      cmocka_unit_test(test_tied),          cmocka_unit_test(test_gpt_block),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
