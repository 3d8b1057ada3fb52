// SPDX-License-Identifier: MIT
//
// test_parallel: torch.chunk's split rule, torch.cuda.comm's broadcast /
// scatter / gather / reduce_add, ct_module_replicate, forward hooks, state
// dicts with the "module." prefix, and DataParallel, on the device under
// test repeated three times (cpu,cpu,cpu or cuda:0,cuda:0,cuda:0).
//
// References: the seed tutorial's printed splits (30 rows on 3 GPUs ->
// 10+10+10, the last 10 -> 4+4+2) and torch.chunk's rule (chunks of
// ceil(n/k), the values below were printed by torch 2.x); float64 math of
// the same weights for the forward and every parameter gradient of a
// two-layer network, whatever the split; exact equality for copies.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define IN 5
#define HID 4
#define OUT 3

static ct_device devs[3];

// ---- torch.chunk ---------------------------------------------------------------------------------
static void test_chunk_sizes(void **state) {
  (void)state;
  // {rows, chunks, expected sizes..., 0}: torch.arange(rows).chunk(chunks)
  static const int64_t cases[][8] = {
      {30, 3, 10, 10, 10, 0}, {10, 3, 4, 4, 2, 0}, {2, 3, 1, 1, 0},   {5, 4, 2, 2, 1, 0},
      {7, 3, 3, 3, 1, 0},     {1, 3, 1, 0},        {6, 4, 2, 2, 2, 0}, {100, 1, 100, 0},
      {9, 4, 3, 3, 3, 0},     {17, 5, 4, 4, 4, 4, 1, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int64_t sizes[CT_MAX_REPLICAS];
    int n = -1;
    TU_OK(ct_chunk_sizes(cases[c][0], (int)cases[c][1], sizes, &n));
    int want = 0;
    while (cases[c][2 + want]) ++want;
    assert_int_equal(n, want);
    for (int i = 0; i < n; ++i) assert_int_equal(sizes[i], cases[c][2 + i]);
  }
  int64_t sizes[CT_MAX_REPLICAS];
  int n;
  assert_int_not_equal(ct_chunk_sizes(10, 0, sizes, &n), CT_OK);
  tu_assert_error_contains("chunks=0", "chunk of 0");
  assert_int_not_equal(ct_chunk_sizes(0, 3, sizes, &n), CT_OK);
  tu_assert_error_contains("cannot split 0 rows", "empty");
}

// ---- comm --------------------------------------------------------------------------------------
static void test_scatter_gather(void **state) {
  (void)state;
  double x[7 * 3];
  tu_fill_uniform(x, 7 * 3, -1, 1);
  ct_tensor *t = tu_from_f64(x, CT_SHAPE(7, 3), CT_F32, tu_device);
  TU_CHECK(t);
  double *xr = tu_to_f64(t); // as rounded to float32: copies must match exactly
  memcpy(x, xr, sizeof x);
  free(xr);
  ct_tensor *parts[3] = {NULL};
  int k = 0;
  TU_OK(ct_comm_scatter(t, devs, 3, NULL, parts, &k));
  assert_int_equal(k, 3);
  int64_t want[3] = {3, 3, 1}, row = 0;
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(ct_shape_of(parts[i]).d[0], want[i]);
    tu_assert_close(parts[i], x + row * 3, 0, 0, "scatter chunk");
    row += want[i];
  }
  ct_tensor *back = ct_comm_gather(parts, 3, tu_device);
  TU_CHECK(back);
  assert_true(ct_shape_eq(ct_shape_of(back), CT_SHAPE(7, 3)));
  tu_assert_close(back, x, 0, 0, "gather");
  ct_free(back);
  for (int i = 0; i < 3; ++i) ct_free(parts[i]);

  // Given sizes, a wrong sum, and a gather of mismatched shapes.
  int64_t sizes[3] = {0, 5, 2};
  TU_OK(ct_comm_scatter(t, devs, 3, sizes, parts, &k));
  assert_int_equal(k, 3);
  assert_int_equal(ct_shape_of(parts[0]).d[0], 0);
  tu_assert_close(parts[2], x + 5 * 3, 0, 0, "sized chunk");
  for (int i = 0; i < 3; ++i) ct_free(parts[i]);
  int64_t bad[3] = {1, 1, 1};
  assert_int_not_equal(ct_comm_scatter(t, devs, 3, bad, parts, &k), CT_OK);
  tu_assert_error_contains("sum to 3, but expected 7", "bad sizes");
  ct_tensor *other = ct_zeros(CT_SHAPE(2, 4), CT_F32, tu_device);
  ct_tensor *pair[2] = {t, other};
  assert_null(ct_comm_gather(pair, 2, tu_device));
  tu_assert_error_contains("tensor 1 (2, 4) does not match tensor 0 (7, 3) float32", "gather mismatch");
  ct_free(other);
  ct_free(t);
}

static void test_broadcast_reduce_add(void **state) {
  (void)state;
  double a[6], b[6], c[6], sum[6];
  tu_fill_uniform(a, 6, -1, 1);
  tu_fill_uniform(b, 6, -1, 1);
  tu_fill_uniform(c, 6, -1, 1);
  ct_tensor *ta = tu_from_f64(a, CT_SHAPE(2, 3), CT_F32, tu_device);
  double *ar = tu_to_f64(ta);
  memcpy(a, ar, sizeof a);
  free(ar);
  ct_tensor *copies[3] = {NULL};
  TU_OK(ct_comm_broadcast(ta, devs, 3, copies));
  for (int i = 0; i < 3; ++i) {
    tu_assert_close(copies[i], a, 0, 0, "broadcast copy");
    TU_OK(ct_fill_(copies[i], 7.0)); // a copy, not a view: the source stays
  }
  tu_assert_close(ta, a, 0, 0, "broadcast source untouched");
  for (int i = 0; i < 3; ++i) ct_free(copies[i]);

  ct_tensor *ts[3] = {ta, tu_from_f64(b, CT_SHAPE(2, 3), CT_F32, tu_device),
                      tu_from_f64(c, CT_SHAPE(2, 3), CT_F32, tu_device)};
  double *fa = tu_to_f64(ts[0]), *fb = tu_to_f64(ts[1]), *fc = tu_to_f64(ts[2]);
  for (int i = 0; i < 6; ++i) sum[i] = fa[i] + fb[i] + fc[i];
  ct_tensor *s = ct_comm_reduce_add(ts, 3, tu_device);
  TU_CHECK(s);
  tu_assert_close(s, sum, tu_rtol(CT_F32), tu_atol(CT_F32), "reduce_add");
  ct_free(s);
  ct_tensor *row = ct_zeros(CT_SHAPE(3), CT_F32, tu_device); // would broadcast in ct_add: refused here
  ct_tensor *mixed[2] = {ta, row};
  assert_null(ct_comm_reduce_add(mixed, 2, tu_device));
  tu_assert_error_contains("tensor 1 has shape (3,)", "reduce_add shapes");
  ct_free(row);
  free(fa), free(fb), free(fc);
  for (int i = 0; i < 3; ++i) ct_free(ts[i]);
}

// ---- the model and its float64 reference -----------------------------------------------------------
static ct_module *two_layer(void) {
  ct_module *mods[3] = {ct_nn_linear(IN, HID, true), ct_nn_relu(), ct_nn_linear(HID, OUT, true)};
  ct_module *m = ct_nn_sequential(3, mods);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

typedef struct ref_net {
  double w1[HID * IN], b1[HID], w2[OUT * HID], b2[OUT];
} ref_net;

static void read_weights(ct_module *m, ref_net *r) {
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  assert_int_equal(n, 4);
  double *dst[4] = {r->w1, r->b1, r->w2, r->b2};
  size_t len[4] = {HID * IN, HID, OUT * HID, OUT};
  for (int i = 0; i < 4; ++i) {
    double *v = tu_to_f64(p[i]->value);
    memcpy(dst[i], v, len[i] * sizeof(double));
    free(v);
  }
}

// y = W2 relu(W1 x + b1) + b2 for rows x; then the grads of sum(g * y).
static void ref_forward_backward(const ref_net *r, const double *x, const double *g, int rows, double *y,
                                 ref_net *grad) {
  memset(grad, 0, sizeof *grad);
  for (int n = 0; n < rows; ++n) {
    double h[HID], pre[HID];
    for (int j = 0; j < HID; ++j) {
      pre[j] = r->b1[j];
      for (int i = 0; i < IN; ++i) pre[j] += r->w1[j * IN + i] * x[n * IN + i];
      h[j] = pre[j] > 0 ? pre[j] : 0;
    }
    for (int o = 0; o < OUT; ++o) {
      y[n * OUT + o] = r->b2[o];
      for (int j = 0; j < HID; ++j) y[n * OUT + o] += r->w2[o * HID + j] * h[j];
    }
    double dh[HID] = {0};
    for (int o = 0; o < OUT; ++o) {
      double go = g[n * OUT + o];
      grad->b2[o] += go;
      for (int j = 0; j < HID; ++j) grad->w2[o * HID + j] += go * h[j], dh[j] += go * r->w2[o * HID + j];
    }
    for (int j = 0; j < HID; ++j) {
      double d = pre[j] > 0 ? dh[j] : 0;
      grad->b1[j] += d;
      for (int i = 0; i < IN; ++i) grad->w1[j * IN + i] += d * x[n * IN + i];
    }
  }
}

static void assert_grads(ct_module *m, const ref_net *want, double scale, const char *what) {
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  const double *src[4] = {want->w1, want->b1, want->w2, want->b2};
  size_t len[4] = {HID * IN, HID, OUT * HID, OUT};
  for (int i = 0; i < 4; ++i) {
    TU_CHECK(p[i]->grad);
    double ref[HID * IN];
    for (size_t e = 0; e < len[i]; ++e) ref[e] = scale * src[i][e];
    tu_assert_close(p[i]->grad, ref, 1e-5, 1e-5, what);
  }
}

// ---- replicate, hooks, state dicts -----------------------------------------------------------------
static void test_replicate(void **state) {
  (void)state;
  ct_module *m = two_layer();
  ct_module *r = ct_module_replicate(m, tu_device);
  TU_CHECK(r);
  int nm = 0, nr = 0;
  ct_param **pm = ct_module_state(m, &nm), **pr = ct_module_state(r, &nr);
  assert_int_equal(nm, nr);
  for (int i = 0; i < nm; ++i) {
    assert_string_equal(pm[i]->name, pr[i]->name);
    double *v = tu_to_f64(pm[i]->value);
    tu_assert_close(pr[i]->value, v, 0, 0, pm[i]->name);
    free(v);
    assert_ptr_not_equal(pm[i]->value, pr[i]->value);
  }
  char *a = ct_module_str(m), *b = ct_module_str(r);
  assert_string_equal(a, b);
  free(a), free(b);
  TU_OK(ct_fill_(pr[0]->value, 0.0)); // the replica's own storage
  double *w = tu_to_f64(pm[0]->value);
  bool any_nonzero = false;
  for (int i = 0; i < HID * IN; ++i) any_nonzero |= w[i] != 0;
  assert_true(any_nonzero);
  free(w);
  ct_module_free(r);
  ct_module_free(m);
}

typedef struct hook_log {
  int calls;
  int64_t rows[8];
} hook_log;

static void log_rows(ct_module *m, const ct_tensor *in, const ct_tensor *out, void *ctx) {
  (void)m;
  hook_log *log = ctx;
  assert_int_equal(ct_shape_of(in).d[0], ct_shape_of(out).d[0]);
  if (log->calls < 8) log->rows[log->calls] = ct_shape_of(in).d[0];
  log->calls++;
}

static void test_state_dict_prefix(void **state) {
  (void)state;
  ct_module *m = two_layer();
  int n = 0;
  ct_named_tensor *e = ct_module_state_dict(m, "module.", &n);
  TU_CHECK(e);
  assert_int_equal(n, 4);
  assert_string_equal(e[0].name, "module.0.weight");
  assert_string_equal(e[3].name, "module.2.bias");
  ct_module *bare = two_layer();
  assert_int_not_equal(ct_module_load_state(bare, e, n, true), CT_OK);
  tu_assert_error_contains("Missing key(s) in state_dict: \"0.weight\"", "prefixed keys");
  tu_assert_error_contains("Unexpected key(s) in state_dict: \"module.0.weight\"", "prefixed keys");
  assert_int_equal(ct_consume_prefix_in_state_dict_if_present(e, n, "module."), 4);
  assert_int_equal(ct_consume_prefix_in_state_dict_if_present(e, n, "module."), 0);
  TU_OK(ct_module_load_state(bare, e, n, true));
  ref_net a, b;
  read_weights(m, &a);
  read_weights(bare, &b);
  assert_memory_equal(&a, &b, sizeof a);
  ct_named_tensors_free(e, n);
  ct_module_free(bare);
  ct_module_free(m);
}

// ---- DataParallel -------------------------------------------------------------------------------------
// Forward and backward of `rows` rows on 3 replicas equal the float64 math
// of the whole batch; the split is torch.chunk's; hooks see each chunk.
static void check_dp(int rows, int want_k, const int64_t *want_split) {
  ct_module *m = two_layer();
  ct_data_parallel *dp = ct_data_parallel_create(m, devs, 3);
  TU_CHECK(dp);
  assert_ptr_equal(ct_data_parallel_module(dp), m);
  assert_ptr_equal(ct_data_parallel_replica(dp, 0), m);
  hook_log logs[3] = {{0}};
  for (int i = 0; i < 3; ++i) ct_module_register_forward_hook(ct_data_parallel_replica(dp, i), log_rows, &logs[i]);
  ref_net r, grad;
  read_weights(m, &r);
  double x[30 * IN], g[30 * OUT], y[30 * OUT];
  tu_fill_uniform(x, rows * IN, -2, 2);
  tu_fill_uniform(g, rows * OUT, -1, 1);
  ct_tensor *tx = tu_from_f64(x, CT_SHAPE(rows, IN), CT_F32, tu_device);
  ct_tensor *tg = tu_from_f64(g, CT_SHAPE(rows, OUT), CT_F32, tu_device);
  double *xr = tu_to_f64(tx), *gr = tu_to_f64(tg); // the values as rounded to float32
  ref_forward_backward(&r, xr, gr, rows, y, &grad);
  for (int pass = 1; pass <= 2; ++pass) { // the second pass accumulates, as autograd does
    ct_tensor *out = ct_data_parallel_forward(dp, tx);
    TU_CHECK(out);
    assert_true(ct_shape_eq(ct_shape_of(out), CT_SHAPE(rows, OUT)));
    assert_true(ct_device_eq(ct_device_of(out), devs[0]));
    tu_assert_close(out, y, 1e-5, 1e-5, "DataParallel forward");
    int64_t split[CT_MAX_REPLICAS];
    assert_int_equal(ct_data_parallel_last_split(dp, split), want_k);
    for (int i = 0; i < want_k; ++i) {
      assert_int_equal(split[i], want_split[i]);
      assert_int_equal(logs[i].calls, pass);
      assert_int_equal(logs[i].rows[pass - 1], want_split[i]);
    }
    for (int i = want_k; i < 3; ++i) assert_int_equal(logs[i].calls, 0);
    TU_OK(ct_data_parallel_backward_params(dp, tg));
    assert_grads(m, &grad, pass, "DataParallel grads");
    ct_free(out);
  }
  free(xr), free(gr);
  ct_free(tx), ct_free(tg);
  ct_data_parallel_free(dp);
  ct_module_free(m);
}

static void test_dp_30(void **state) {
  (void)state;
  check_dp(30, 3, (const int64_t[]){10, 10, 10});
}
static void test_dp_10(void **state) {
  (void)state;
  check_dp(10, 3, (const int64_t[]){4, 4, 2});
}
static void test_dp_2(void **state) { // fewer rows than replicas: fewer replicas
  (void)state;
  check_dp(2, 2, (const int64_t[]){1, 1});
}

// The replicas see the module's new weights at the next forward.
static void test_dp_after_step(void **state) {
  (void)state;
  ct_module *m = two_layer();
  ct_data_parallel *dp = ct_data_parallel_create(m, devs, 3);
  TU_CHECK(dp);
  double x[9 * IN];
  tu_fill_uniform(x, 9 * IN, -1, 1);
  ct_tensor *tx = tu_from_f64(x, CT_SHAPE(9, IN), CT_F32, tu_device);
  ct_free(ct_data_parallel_forward(dp, tx));
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  for (int i = 0; i < n; ++i) TU_OK(ct_fill_(p[i]->value, 0.5)); // what an optimizer step does: in place
  ct_tensor *out = ct_data_parallel_forward(dp, tx);
  TU_CHECK(out);
  ref_net r, grad;
  read_weights(m, &r);
  double y[9 * OUT], g[9 * OUT] = {0};
  double *xr = tu_to_f64(tx);
  ref_forward_backward(&r, xr, g, 9, y, &grad);
  tu_assert_close(out, y, 1e-5, 1e-5, "forward after the module changed");
  free(xr);
  ct_free(out), ct_free(tx);
  ct_data_parallel_free(dp);
  ct_module_free(m);
}

static void test_dp_errors(void **state) {
  (void)state;
  ct_module *m = two_layer();
  assert_null(ct_data_parallel_create(m, devs, 0));
  tu_assert_error_contains("expected 1 to 16 device ids, got 0", "no devices");
  ct_data_parallel *dp = ct_data_parallel_create(m, devs, 3);
  TU_CHECK(dp);
  assert_int_not_equal(ct_data_parallel_backward_params(dp, NULL), CT_OK);
  ct_tensor *g = ct_zeros(CT_SHAPE(3, OUT), CT_F32, tu_device);
  assert_int_not_equal(ct_data_parallel_backward_params(dp, g), CT_OK);
  tu_assert_error_contains("call ct_data_parallel_forward first", "backward before forward");
  ct_tensor *wrong = ct_zeros(CT_SHAPE(6, IN + 1), CT_F32, tu_device); // 6 features for Linear(5, 4)
  assert_null(ct_data_parallel_forward(dp, wrong));
  tu_assert_error_contains("caught an error in replica 0 on device", "replica error");
  tu_assert_error_contains("input (2, 6), expected (*, 5)", "replica error names the shapes");
  ct_free(wrong), ct_free(g);
  ct_data_parallel_free(dp);
  ct_module_free(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  for (int i = 0; i < 3; ++i) devs[i] = tu_device;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunk_sizes),
      cmocka_unit_test(test_scatter_gather),
      cmocka_unit_test(test_broadcast_reduce_add),
      cmocka_unit_test(test_replicate),
      cmocka_unit_test(test_state_dict_prefix),
      cmocka_unit_test(test_dp_30),
      cmocka_unit_test(test_dp_10),
      cmocka_unit_test(test_dp_2),
      cmocka_unit_test(test_dp_after_step),
      cmocka_unit_test(test_dp_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
