// SPDX-License-Identifier: MIT
//
// graph (graph.h): capture and replay of a whole training step, on the CPU
// recorder (unit.graph) and on real CUDA stream capture (gpu.graph).
//
// The reference for replay is the eager step itself: the same model from the
// same weights, trained eagerly on the same batches, must reach the same
// parameters and losses bit for bit, since a replay runs the same kernels on
// the same addresses. Each forbidden operation must fail with its message,
// invalidate the capture (capture_end names it) and leave the runtime
// usable: eager ops work and a new capture replays correctly.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define B 8     // batch rows
#define IN 5    // input features
#define HID 16  // hidden width
#define OUT 3   // outputs
#define WARMUP 3
#define STEPS 6

static ct_module *mlp(void) {
  ct_module *mods[] = {ct_nn_linear(IN, HID, true), ct_nn_relu(), ct_nn_linear(HID, HID, true), ct_nn_relu(),
                       ct_nn_linear(HID, OUT, true)};
  ct_module *m = ct_nn_sequential(5, mods);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

static ct_optimizer *sgd(ct_module *m) {
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  ct_sgd_options o = ct_sgd_defaults(0.05);
  o.momentum = 0.9;
  o.weight_decay = 1e-3;
  ct_optimizer *opt = ct_optim_sgd(p, n, o);
  TU_CHECK(opt);
  return opt;
}

// Copies a's parameters into b (the same start for both runs).
static void same_weights(ct_module *a, ct_module *b) {
  int n = 0;
  ct_named_tensor *s = ct_module_state_dict(a, "", &n);
  TU_CHECK(s);
  TU_OK(ct_module_load_state(b, s, n, true));
  ct_named_tensors_free(s, n);
}

// One training step: zero_grad(set_to_none), forward, MSE, backward, SGD.
// Returns the 0-d loss.
static ct_tensor *train_step(ct_module *m, ct_optimizer *opt, const ct_tensor *x, const ct_tensor *y) {
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;
  ct_tensor *out = ct_module_forward(m, x), *g = NULL;
  ct_tensor *loss = out ? ct_mse_loss(out, y, &g) : NULL;
  int rc = loss ? ct_module_backward_params(m, g) : -1;
  if (rc == CT_OK) rc = ct_optimizer_step(opt);
  ct_free(out), ct_free(g);
  if (rc != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
}

static double item(const ct_tensor *t) {
  double v = NAN;
  TU_OK(ct_item(t, &v));
  return v;
}

// Every parameter of a and b equal, bit for bit.
static void assert_same_params(ct_module *a, ct_module *b) {
  int na = 0, nb = 0;
  ct_param **pa = ct_module_parameters(a, &na), **pb = ct_module_parameters(b, &nb);
  assert_int_equal(na, nb);
  for (int i = 0; i < na; ++i) {
    double *x = tu_to_f64(pa[i]->value), *y = tu_to_f64(pb[i]->value);
    for (int64_t e = 0; e < ct_numel(pa[i]->value); ++e)
      if (memcmp(&x[e], &y[e], sizeof(double)) != 0)
        fail_msg("parameter %s element %lld: eager %.9g, replay %.9g", pa[i]->name, (long long)e, x[e], y[e]);
    free(x), free(y);
  }
}

// A host copy of m's parameters (n arrays), to see later how far they moved.
typedef struct snapshot {
  int n;
  double *v[16];
} snapshot;
static snapshot take(ct_module *m) {
  snapshot s = {0, {0}};
  ct_param **p = ct_module_parameters(m, &s.n);
  assert_true(s.n <= 16);
  for (int i = 0; i < s.n; ++i) s.v[i] = tu_to_f64(p[i]->value);
  return s;
}
static void drop(snapshot *s) {
  for (int i = 0; i < s->n; ++i) free(s->v[i]);
}
// The largest |p - p0| over m's parameters, p0 from the snapshot.
static double max_moved(ct_module *m, const snapshot *s0) {
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  double moved = 0;
  for (int i = 0; i < n; ++i) {
    double *x = tu_to_f64(p[i]->value);
    for (int64_t e = 0; e < ct_numel(p[i]->value); ++e) moved = fmax(moved, fabs(x[e] - s0->v[i][e]));
    free(x);
  }
  return moved;
}

static int sync_device(void) {
  return tu_device.type == CT_CUDA ? ct_cuda_synchronize(tu_device.index) : CT_OK;
}

static ct_tensor *randn(int64_t r, int64_t c) {
  ct_tensor *t = ct_randn(CT_SHAPE(r, c), CT_F32, tu_device);
  TU_CHECK(t);
  return t;
}

// The corrected pattern of the seed: warm-up on a side stream, capture of the
// whole step with static input and target, replay after copy_; against the
// same steps run eagerly.
static void test_replay_equals_eager(void **state) {
  (void)state;
  ct_module *eager = mlp(), *graphed = mlp();
  same_weights(eager, graphed);
  snapshot start = take(eager);
  ct_optimizer *oe = sgd(eager), *og = sgd(graphed);
  ct_tensor *xs[WARMUP + STEPS], *ys[WARMUP + STEPS];
  for (int i = 0; i < WARMUP + STEPS; ++i) xs[i] = randn(B, IN), ys[i] = randn(B, OUT);
  ct_stream *side = ct_stream_create(tu_device, 0), *def = ct_current_stream(tu_device);
  TU_CHECK(side);

  // Eager: every step on the side stream too, so both runs use one stream.
  double eager_loss[STEPS];
  TU_OK(ct_set_stream(side));
  for (int i = 0; i < WARMUP + STEPS; ++i) {
    ct_tensor *l = train_step(eager, oe, xs[i], ys[i]);
    TU_CHECK(l);
    if (i >= WARMUP) eager_loss[i - WARMUP] = item(l);
    ct_free(l);
  }

  // Graphed: the warm-up steps eagerly, then one captured step.
  ct_tensor *sx = ct_empty(CT_SHAPE(B, IN), CT_F32, tu_device), *sy = ct_empty(CT_SHAPE(B, OUT), CT_F32, tu_device);
  TU_CHECK(sx);
  TU_CHECK(sy);
  for (int i = 0; i < WARMUP; ++i) {
    TU_OK(ct_copy_(sx, xs[i], false));
    TU_OK(ct_copy_(sy, ys[i], false));
    ct_tensor *l = train_step(graphed, og, sx, sy);
    TU_CHECK(l);
    ct_free(l);
  }
  TU_OK(ct_stream_synchronize(side));
  TU_OK(ct_set_stream(def));
  TU_OK(ct_stream_wait_stream(def, side));

  snapshot before = take(graphed);
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  assert_true(ct_is_current_stream_capturing(tu_device));
  ct_tensor *sloss = train_step(graphed, og, sx, sy);
  TU_CHECK(sloss);
  TU_OK(ct_cuda_graph_capture_end(g));
  assert_false(ct_is_current_stream_capturing(tu_device));
  assert_true(ct_current_stream(tu_device) == def); // capture_end restored the current stream
  assert_true(ct_cuda_graph_num_nodes(g) > 10);
  TU_OK(sync_device());
  // Capture runs nothing: the parameters are still the warm-up's.
  assert_true(max_moved(graphed, &before) == 0);

  for (int i = 0; i < STEPS; ++i) {
    TU_OK(ct_copy_(sx, xs[WARMUP + i], false));
    TU_OK(ct_copy_(sy, ys[WARMUP + i], false));
    TU_OK(ct_cuda_graph_replay(g));
    double l = item(sloss);
    if (memcmp(&l, &eager_loss[i], sizeof l) != 0)
      fail_msg("step %d: replayed loss %.9g, eager loss %.9g", i, l, eager_loss[i]);
  }
  assert_same_params(eager, graphed);
  assert_true(max_moved(graphed, &start) > 1e-3); // training moved them: the equality is not vacuous

  drop(&start), drop(&before);
  ct_cuda_graph_free(g);
  ct_free(sloss), ct_free(sx), ct_free(sy);
  for (int i = 0; i < WARMUP + STEPS; ++i) ct_free(xs[i]), ct_free(ys[i]);
  ct_optimizer_free(oe), ct_optimizer_free(og);
  ct_module_free(eager), ct_module_free(graphed);
  ct_stream_free(side);
}

// ---- the transformer family under capture ---------------------------------------------------------
// tokens (B, T) -> Embedding(V, C) -> LayerNorm -> CausalSelfAttention -> GELU
// -> cross-entropy over the C outputs against (B, T) targets: every entry of
// the transformer kernel table (embedding and its backward, layernorm and its
// backward, the masked softmax and its backward, gelu, the LM cross-entropy)
// recorded and replayed.
#define TV 12 // vocabulary
#define TC 8  // width (and the classes of the loss)
#define TT 6  // sequence length

static ct_module *tiny_gpt(void) {
  ct_module *mods[] = {ct_nn_embedding(TV, TC), ct_nn_layernorm(TC, 1e-5), ct_nn_causal_self_attention(TC, 2, true),
                       ct_nn_gelu(true)};
  ct_module *m = ct_nn_sequential(4, mods);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

static ct_tensor *tokens(int64_t hi) {
  int64_t v[B * TT];
  double u[B * TT];
  tu_fill_uniform(u, B * TT, 0, (double)hi);
  for (int i = 0; i < B * TT; ++i) v[i] = (int64_t)u[i];
  ct_tensor *t = ct_from_host(v, CT_SHAPE(B, TT), CT_I64, tu_device);
  TU_CHECK(t);
  return t;
}

static ct_tensor *lm_step(ct_module *m, ct_optimizer *opt, const ct_tensor *x, const ct_tensor *y) {
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;
  ct_tensor *out = ct_module_forward(m, x), *g = NULL;
  ct_tensor *loss = out ? ct_cross_entropy(out, y, -100, &g) : NULL;
  int rc = loss ? ct_module_backward_params(m, g) : -1;
  if (rc == CT_OK) rc = ct_optimizer_step(opt);
  ct_free(out), ct_free(g);
  if (rc != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
}

static void test_transformer_replay_equals_eager(void **state) {
  (void)state;
  ct_module *eager = tiny_gpt(), *graphed = tiny_gpt();
  same_weights(eager, graphed);
  snapshot start = take(eager);
  ct_optimizer *oe = sgd(eager), *og = sgd(graphed);
  ct_tensor *xs[WARMUP + STEPS], *ys[WARMUP + STEPS];
  for (int i = 0; i < WARMUP + STEPS; ++i) xs[i] = tokens(TV), ys[i] = tokens(TC);
  ct_stream *side = ct_stream_create(tu_device, 0), *def = ct_current_stream(tu_device);
  TU_CHECK(side);
  double eager_loss[STEPS];
  TU_OK(ct_set_stream(side));
  for (int i = 0; i < WARMUP + STEPS; ++i) {
    ct_tensor *l = lm_step(eager, oe, xs[i], ys[i]);
    TU_CHECK(l);
    if (i >= WARMUP) eager_loss[i - WARMUP] = item(l);
    ct_free(l);
  }
  ct_tensor *sx = ct_empty(CT_SHAPE(B, TT), CT_I64, tu_device), *sy = ct_empty(CT_SHAPE(B, TT), CT_I64, tu_device);
  TU_CHECK(sx);
  TU_CHECK(sy);
  for (int i = 0; i < WARMUP; ++i) {
    TU_OK(ct_copy_(sx, xs[i], false));
    TU_OK(ct_copy_(sy, ys[i], false));
    ct_tensor *l = lm_step(graphed, og, sx, sy);
    TU_CHECK(l);
    ct_free(l);
  }
  TU_OK(ct_stream_synchronize(side));
  TU_OK(ct_set_stream(def));
  TU_OK(ct_stream_wait_stream(def, side));
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  ct_tensor *sloss = lm_step(graphed, og, sx, sy);
  TU_CHECK(sloss);
  TU_OK(ct_cuda_graph_capture_end(g));
  for (int i = 0; i < STEPS; ++i) {
    TU_OK(ct_copy_(sx, xs[WARMUP + i], false));
    TU_OK(ct_copy_(sy, ys[WARMUP + i], false));
    TU_OK(ct_cuda_graph_replay(g));
    double l = item(sloss);
    if (memcmp(&l, &eager_loss[i], sizeof l) != 0)
      fail_msg("transformer step %d: replayed loss %.9g, eager loss %.9g", i, l, eager_loss[i]);
  }
  assert_same_params(eager, graphed);
  assert_true(max_moved(graphed, &start) > 1e-4);
  // A token outside the vocabulary found at replay fails the replay with the eager message.
  int64_t bad[B * TT] = {0};
  bad[5] = TV + 3;
  ct_tensor *bt = ct_from_host(bad, CT_SHAPE(B, TT), CT_I64, tu_device);
  TU_CHECK(bt);
  TU_OK(ct_copy_(sx, bt, false));
  if (tu_device.type == CT_CPU) {
    assert_true(ct_cuda_graph_replay(g) != CT_OK);
    tu_assert_error_contains("index out of range in self", "a bad token at replay");
  }
  drop(&start);
  ct_cuda_graph_free(g);
  ct_free(bt), ct_free(sloss), ct_free(sx), ct_free(sy);
  for (int i = 0; i < WARMUP + STEPS; ++i) ct_free(xs[i]), ct_free(ys[i]);
  ct_optimizer_free(oe), ct_optimizer_free(og);
  ct_module_free(eager), ct_module_free(graphed);
  ct_stream_free(side);
}

// A tensor of n elements holding x[i] = i + 1 (exact in every dtype used).
static ct_tensor *counting(int64_t n) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) v[i] = (double)(i + 1);
  ct_tensor *t = tu_from_f64(v, CT_SHAPE(n), CT_F32, tu_device);
  free(v);
  TU_CHECK(t);
  return t;
}

// Elements of t equal a * (i + 1) + b, exactly.
static void assert_affine(const ct_tensor *t, double a, double b, const char *what) {
  double *v = tu_to_f64(t);
  for (int64_t i = 0; i < ct_numel(t); ++i)
    if (v[i] != a * (double)(i + 1) + b)
      fail_msg("%s: element %lld is %g, expected %g", what, (long long)i, v[i], a * (double)(i + 1) + b);
  free(v);
}

// The runtime is usable: a fresh capture of y = 3x + 1 (with a temporary)
// replays what eager arithmetic gives, after new data is copied in.
static void assert_capture_works(ct_stream *side) {
  ct_tensor *x = counting(37), *x2 = counting(37);
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  ct_tensor *t = ct_mul_scalar(x, 3.0), *y = t ? ct_add_scalar(t, 1.0) : NULL;
  ct_free(t);
  TU_OK(ct_cuda_graph_capture_end(g));
  TU_CHECK(y);
  ct_tensor *twice = ct_mul_scalar(x2, 2.0); // new data: x = 2 (i + 1)
  TU_CHECK(twice);
  TU_OK(ct_copy_(x, twice, false));
  TU_OK(ct_cuda_graph_replay(g));
  TU_OK(sync_device());
  assert_affine(y, 6.0, 1.0, "replay after new data");
  ct_cuda_graph_free(g);
  ct_free(x), ct_free(x2), ct_free(twice), ct_free(y);
}

// ---- the seed's bug ------------------------------------------------------------------------

// The seed re-creates static_input inside the capture: the randn becomes part
// of the graph, and each replay overwrites what copy_ put there. Made once
// before the capture, static_input keeps the copied data.
static void test_seed_bug_and_fix(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_tensor *real = counting(64);
  for (int buggy = 1; buggy >= 0; --buggy) {
    ct_tensor *static_input = ct_zeros(CT_SHAPE(64), CT_F32, tu_device);
    TU_CHECK(static_input);
    ct_cuda_graph *g = ct_cuda_graph_create();
    TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
    if (buggy) { // static_input = torch.randn(...) inside `with torch.cuda.graph(g):`
      ct_free(static_input);
      static_input = ct_randn(CT_SHAPE(64), CT_F32, tu_device);
    }
    ct_tensor *out = ct_mul_scalar(static_input, 2.0); // the "model"
    TU_OK(ct_cuda_graph_capture_end(g));
    TU_CHECK(static_input);
    TU_CHECK(out);
    TU_OK(ct_copy_(static_input, real, false)); // static_input.copy_(real_input)
    TU_OK(ct_cuda_graph_replay(g));
    TU_OK(sync_device());
    double *in = tu_to_f64(static_input), *o = tu_to_f64(out);
    int64_t kept = 0;
    for (int64_t i = 0; i < 64; ++i) {
      kept += in[i] == (double)(i + 1);
      assert_true(o[i] == 2.0 * in[i]); // the model saw what static_input holds now
    }
    if (buggy) {
      assert_true(kept < 4); // the captured randn overwrote the copied data
      double first = in[0];
      TU_OK(ct_copy_(static_input, real, false));
      TU_OK(ct_cuda_graph_replay(g));
      double *again = tu_to_f64(static_input);
      assert_true(again[0] == first); // the same numbers again: the Philox offset is fixed at capture
      free(again);
    } else {
      assert_int_equal(kept, 64);
      assert_affine(out, 2.0, 0.0, "corrected capture");
    }
    free(in), free(o);
    ct_cuda_graph_free(g);
    ct_free(out), ct_free(static_input);
  }
  ct_free(real);
  ct_stream_free(side);
}

// ---- what capture forbids --------------------------------------------------------------------

typedef struct forbidden {
  const char *name;
  int (*run)(ct_tensor *x, ct_stream *side); // non-zero expected
  const char *needle;
  bool cuda_only;
} forbidden;

static int do_item(ct_tensor *x, ct_stream *side) {
  (void)side;
  ct_tensor *s = ct_sum(x);
  double v = 0;
  int rc = s ? ct_item(s, &v) : -1;
  ct_free(s);
  return rc;
}
static int do_stream_sync(ct_tensor *x, ct_stream *side) { (void)x; return ct_stream_synchronize(side); }
static int do_event_sync(ct_tensor *x, ct_stream *side) {
  (void)x;
  ct_event *e = ct_event_create(tu_device, false);
  int rc = e ? ct_event_record(e, side) : -1;
  if (rc == CT_OK) rc = ct_event_synchronize(e);
  ct_event_free(e);
  return rc;
}
static int do_device_sync(ct_tensor *x, ct_stream *side) {
  (void)x, (void)side;
  return ct_cuda_synchronize(tu_device.index);
}
static int do_copy_to_host(ct_tensor *x, ct_stream *side) {
  (void)side;
  float buf[64];
  return ct_copy_to_host(x, buf, sizeof buf);
}
static int do_from_host(ct_tensor *x, ct_stream *side) {
  (void)x, (void)side;
  float data[4] = {1, 2, 3, 4};
  ct_tensor *t = ct_from_host(data, CT_SHAPE(4), CT_F32, tu_device);
  int rc = t ? CT_OK : (int)ct_last_status();
  ct_free(t);
  return rc;
}
static int do_empty_cache(ct_tensor *x, ct_stream *side) { (void)x, (void)side; return ct_empty_cache(tu_device); }
static int do_any_nonfinite(ct_tensor *x, ct_stream *side) {
  (void)side;
  bool any = false;
  return ct_any_nonfinite(x, &any);
}
static int do_other_pool(ct_tensor *x, ct_stream *side) {
  (void)x, (void)side;
  ct_mempool *p = ct_mempool_create(tu_device);
  ct_block *b = p ? ct_block_alloc(tu_device, 1024, NULL, p) : NULL; // for the current (capture) stream
  int rc = b ? CT_OK : (int)ct_last_status();
  ct_block_free(b);
  ct_mempool_free(p);
  return rc;
}
static int do_legacy_stream(ct_tensor *x, ct_stream *side) {
  TU_OK(ct_set_stream(ct_default_stream(tu_device)));
  ct_tensor *y = ct_add(x, x);
  int rc = y ? CT_OK : (int)ct_last_status();
  TU_OK(ct_set_stream(side));
  ct_free(y);
  return rc;
}

static const forbidden cases[] = {
    {"item", do_item, "ct_item: operation not permitted when stream is capturing", false},
    {"stream sync", do_stream_sync, "ct_stream_synchronize: operation not permitted when stream is capturing", false},
    {"event sync", do_event_sync, "ct_event_synchronize: operation not permitted when stream is capturing", false},
    {"device sync", do_device_sync, "ct_cuda_synchronize: operation not permitted when stream is capturing", true},
    {"copy to host", do_copy_to_host, "ct_copy_to_host: operation not permitted when stream is capturing", false},
    {"from host", do_from_host, "cti_memcpy: operation not permitted when stream is capturing", false},
    {"empty_cache", do_empty_cache, "ct_empty_cache: operation not permitted when stream is capturing", false},
    {"any_nonfinite", do_any_nonfinite, "ct_any_nonfinite: operation not permitted when stream is capturing", false},
    {"other pool", do_other_pool, "must come from the graph's private pool", false},
    {"legacy stream", do_legacy_stream,
     "ct_add: operation would make the legacy stream depend on a capturing blocking stream", false},
};

static void test_forbidden_during_capture(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0), *def = ct_current_stream(tu_device);
  TU_CHECK(side);
  ct_tensor *x = counting(64);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) {
    const forbidden *c = &cases[k];
    if (c->cuda_only && tu_device.type != CT_CUDA) continue;
    ct_cuda_graph *g = ct_cuda_graph_create();
    TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
    ct_tensor *y = ct_mul_scalar(x, 2.0); // some captured work first
    TU_CHECK(y);
    int rc = c->run(x, side);
    if (rc == CT_OK) fail_msg("%s during capture succeeded", c->name);
    if (ct_last_status() != CT_ERR_CAPTURE)
      fail_msg("%s: status %s: %s", c->name, ct_status_name(ct_last_status()), ct_last_error());
    tu_assert_error_contains(c->needle, c->name);
    // The capture is invalidated: the next kernel on the capture stream fails too.
    ct_tensor *z = ct_add(y, y);
    if (z) fail_msg("%s: a kernel after the refusal was accepted", c->name);
    tu_assert_error_contains("operation failed due to a previous error during capture", c->name);
    // capture_end reports the first refusal and leaves the graph empty.
    assert_int_not_equal(ct_cuda_graph_capture_end(g), CT_OK);
    tu_assert_error_contains("the capture was invalidated", c->name);
    tu_assert_error_contains(c->needle, c->name);
    assert_false(ct_is_current_stream_capturing(tu_device));
    assert_true(ct_current_stream(tu_device) == def);
    assert_int_equal(ct_cuda_graph_num_nodes(g), 0);
    assert_int_not_equal(ct_cuda_graph_replay(g), CT_OK);
    ct_free(y);
    ct_cuda_graph_free(g);
    // Usable again: the same operation runs eagerly, and a new capture works.
    if (c->run != do_legacy_stream && c->run != do_other_pool) TU_OK(c->run(x, side));
    assert_capture_works(side);
  }
  ct_free(x);
  ct_stream_free(side);
}

// Adam computes its bias corrections on the host from the step count, so a
// captured step would freeze them: refused, as PyTorch refuses capturable=False.
static void test_adam_capture_refused(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  ct_module *m = mlp();
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  ct_optimizer *adam = ct_optim_adam(p, n, ct_adam_defaults());
  TU_CHECK(adam);
  ct_tensor *x = randn(B, IN), *y = randn(B, OUT);
  TU_OK(ct_set_stream(side));
  ct_tensor *l = train_step(m, adam, x, y); // warm-up: state exists, grads exist
  TU_CHECK(l);
  ct_free(l);
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  l = train_step(m, adam, x, y);
  assert_null(l);
  tu_assert_error_contains("ct_optimizer_step: Attempting CUDA graph capture of step() for an instance of Adam "
                           "but param_groups' capturable is False.", "adam");
  assert_int_not_equal(ct_cuda_graph_capture_end(g), CT_OK);
  ct_cuda_graph_free(g);
  l = train_step(m, adam, x, y); // eagerly it is fine
  TU_CHECK(l);
  ct_free(l), ct_free(x), ct_free(y);
  ct_optimizer_free(adam);
  ct_module_free(m);
  TU_OK(ct_set_stream(ct_default_stream(tu_device)));
  ct_stream_free(side);
}

static void test_capture_misuse(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  ct_cuda_graph *g = ct_cuda_graph_create(), *h = ct_cuda_graph_create();
  assert_int_not_equal(ct_cuda_graph_capture_begin(g, ct_default_stream(tu_device), NULL), CT_OK);
  tu_assert_error_contains("CUDA graphs must be captured on a non-default stream. (However, after capture, "
                           "it's ok to replay on any stream.)", "default stream");
  assert_false(ct_is_current_stream_capturing(tu_device));
  assert_int_not_equal(ct_cuda_graph_replay(g), CT_OK);
  tu_assert_error_contains("the graph holds no capture", "replay of an empty graph");
  assert_int_not_equal(ct_cuda_graph_capture_end(g), CT_OK);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  assert_int_not_equal(ct_cuda_graph_capture_begin(h, side, NULL), CT_OK);
  tu_assert_error_contains("already capturing", "two captures");
  TU_OK(ct_cuda_graph_capture_end(g)); // an empty capture is a graph of no nodes
  assert_int_equal(ct_cuda_graph_num_nodes(g), 0);
  assert_int_not_equal(ct_cuda_graph_capture_begin(g, side, NULL), CT_OK);
  tu_assert_error_contains("reset it first", "capture into a captured graph");
  TU_OK(ct_cuda_graph_reset(g));
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  TU_OK(ct_cuda_graph_reset(g)); // abandons the capture
  assert_false(ct_is_current_stream_capturing(tu_device));
  ct_cuda_graph_free(g), ct_cuda_graph_free(h);
  assert_capture_works(side);
  ct_stream_free(side);
}

// Work on another stream during capture runs at once, outside the graph.
static void test_other_stream_runs_now(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0), *other = ct_stream_create(tu_device, 0);
  ct_tensor *x = counting(50);
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  TU_OK(ct_set_stream(other));
  ct_tensor *z = ct_mul_scalar(x, 5.0);
  TU_OK(ct_set_stream(side));
  TU_OK(ct_cuda_graph_capture_end(g));
  TU_CHECK(z);
  assert_int_equal(ct_cuda_graph_num_nodes(g), 0);
  TU_OK(ct_stream_synchronize(other));
  assert_affine(z, 5.0, 0.0, "work on another stream during capture");
  ct_cuda_graph_free(g);
  ct_free(z), ct_free(x);
  ct_stream_free(other), ct_stream_free(side);
}

// ---- the private pool ------------------------------------------------------------------------

// Memory the captured step used, freed or not, is never handed to eager
// requests; it goes back when the graph and the tensors it made are gone.
static void test_private_pool(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0), *def = ct_current_stream(tu_device);
  ct_tensor *x = counting(300);
  TU_OK(ct_set_stream(side)); // the side stream's own cached segment, before counting
  ct_free(ct_empty(CT_SHAPE(300), CT_F32, tu_device));
  TU_OK(ct_set_stream(def));
  TU_OK(sync_device());
  size_t r0 = ct_memory_reserved(tu_device);
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  ct_tensor *t = ct_mul_scalar(x, 2.0);
  TU_CHECK(t);
  void *freed = ct_data_ptr(t);
  ct_tensor *y = ct_add_scalar(t, 1.0);
  ct_free(t); // a temporary of the step: its block stays the graph's
  TU_OK(ct_cuda_graph_capture_end(g));
  TU_CHECK(y);
  assert_true(ct_memory_reserved(tu_device) > r0); // the pool's own segment
  TU_OK(ct_set_stream(side));
  ct_tensor *eager[4];
  for (int i = 0; i < 4; ++i) {
    eager[i] = ct_empty(CT_SHAPE(300), CT_F32, tu_device);
    TU_CHECK(eager[i]);
    assert_true(ct_data_ptr(eager[i]) != freed && ct_data_ptr(eager[i]) != ct_data_ptr(y));
  }
  TU_OK(ct_set_stream(def));
  TU_OK(ct_cuda_graph_replay(g));
  TU_OK(sync_device());
  assert_affine(y, 2.0, 1.0, "replay");
  ct_cuda_graph_free(g);
  assert_true(ct_memory_reserved(tu_device) > r0); // y still lives in the pool
  ct_free(y);
  if (ct_memory_reserved(tu_device) != r0)
    fail_msg("reserved %zu after the graph and its tensors went, %zu before", ct_memory_reserved(tu_device), r0);
  for (int i = 0; i < 4; ++i) ct_free(eager[i]);
  ct_free(x);
  ct_stream_free(side);
}

// Two graphs in one pool (graph_pool_handle / g.pool()), replayed in capture order.
static void test_shared_pool(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  ct_tensor *x = counting(40);
  ct_graph_pool *pool = ct_graph_pool_handle(tu_device);
  TU_CHECK(pool);
  ct_cuda_graph *g1 = ct_cuda_graph_create(), *g2 = ct_cuda_graph_create();
  TU_OK(ct_cuda_graph_capture_begin(g1, side, pool));
  ct_tensor *y1 = ct_mul_scalar(x, 2.0);
  TU_OK(ct_cuda_graph_capture_end(g1));
  ct_graph_pool *p1 = ct_cuda_graph_pool(g1);
  TU_OK(ct_cuda_graph_capture_begin(g2, side, p1));
  ct_tensor *y2 = ct_add_scalar(y1, 1.0);
  TU_OK(ct_cuda_graph_capture_end(g2));
  ct_graph_pool_free(p1), ct_graph_pool_free(pool);
  TU_CHECK(y1);
  TU_CHECK(y2);
  TU_OK(ct_cuda_graph_replay(g1));
  TU_OK(ct_cuda_graph_replay(g2));
  TU_OK(sync_device());
  assert_affine(y2, 2.0, 1.0, "two graphs in one pool");
  ct_cuda_graph_free(g1), ct_cuda_graph_free(g2);
  ct_free(y1), ct_free(y2), ct_free(x);
  ct_stream_free(side);
}

// A bad class index fed to a captured cross-entropy fails at replay (CPU) or
// at the next wait (CUDA, as a device-side assert), with the eager message.
static void test_cross_entropy_target_at_replay(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  ct_tensor *logits = randn(4, 3);
  int64_t good[4] = {0, 1, 2, 1}, bad[4] = {0, 7, 2, 1};
  ct_tensor *target = ct_from_host(good, CT_SHAPE(4), CT_I64, tu_device);
  ct_tensor *bad_t = ct_from_host(bad, CT_SHAPE(4), CT_I64, tu_device);
  TU_CHECK(target);
  TU_CHECK(bad_t);
  ct_tensor *warm = ct_cross_entropy_loss(logits, target, NULL); // first use: CUDA's error record is made
  TU_CHECK(warm);
  ct_free(warm);
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  ct_tensor *loss = ct_cross_entropy_loss(logits, target, NULL);
  TU_OK(ct_cuda_graph_capture_end(g));
  TU_CHECK(loss);
  TU_OK(ct_cuda_graph_replay(g));
  TU_OK(sync_device());
  assert_true(isfinite(item(loss)));
  TU_OK(ct_copy_(target, bad_t, false));
  int rc = ct_cuda_graph_replay(g);
  if (rc == CT_OK) rc = sync_device();
  assert_int_not_equal(rc, CT_OK);
  tu_assert_error_contains("Target 7 is out of bounds", "bad target at replay");
  ct_cuda_graph_free(g);
  ct_free(loss), ct_free(logits), ct_free(target), ct_free(bad_t);
  ct_stream_free(side);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_equals_eager),
      cmocka_unit_test(test_transformer_replay_equals_eager),
      cmocka_unit_test(test_seed_bug_and_fix),
      cmocka_unit_test(test_forbidden_during_capture),
      cmocka_unit_test(test_adam_capture_refused),
      cmocka_unit_test(test_capture_misuse),
      cmocka_unit_test(test_other_stream_runs_now),
      cmocka_unit_test(test_private_pool),
      cmocka_unit_test(test_shared_pool),
      cmocka_unit_test(test_cross_entropy_target_at_replay),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
