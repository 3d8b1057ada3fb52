// SPDX-License-Identifier: MIT
//
// test_transformer_torch: the transformer layers against PyTorch, on the
// device under test: Embedding, LayerNorm, GELU (tanh and erf), Softmax,
// CausalSelfAttention, the LM cross-entropy with ignore_index, and a GPT
// block whose lm_head is tied to its token embedding.
//
// tests/fixtures/transformer/<case>.safetensors (written by
// tools/fixtures/transformer.py with torch 1.13) hold a module's initial
// state_dict, fixed inputs and output gradients, and what torch computed
// from them. Here the same module is built in C (this file's table), must
// print as torch printed it, must list torch's state_dict keys (both tied
// names) and named_parameters (the tied one once), loads the initial state
// with strict=true and replays forward and backward in float32.
//
// Invariant checked: every float32 tensor matches torch's within 1e-5
// relative error in the max norm, max_i |c_i - t_i| <= 1e-5 max_i |t_i| (the
// references are torch's float64 results of the float32 inputs, as
// test_conv_torch's). The GPT block: its loss, logits and every parameter's
// gradient, the tied weight's being the sum of lm_head's and wte's terms.
// Its checkpoint: ct_module_save writes both tied names (same data) and
// ct_module_load reads it back into a fresh tied model, and a checkpoint
// with only one of the two names loads with strict=true into the shared
// tensor; one with neither fails naming the key.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_gpt.h"
#include "tu_ref.h"

static ct_module *build(const char *name) {
  if (!strcmp(name, "embedding")) return ct_nn_embedding(7, 5);
  if (!strcmp(name, "layernorm")) return ct_nn_layernorm(6, 1e-5);
  if (!strcmp(name, "layernorm_eps")) return ct_nn_layernorm(40, 1e-3);
  if (!strcmp(name, "gelu_tanh")) return ct_nn_gelu(true);
  if (!strcmp(name, "gelu_none")) return ct_nn_gelu(false);
  if (!strcmp(name, "softmax")) return ct_nn_softmax(-1);
  if (!strcmp(name, "attention")) return ct_nn_causal_self_attention(8, 2, true);
  if (!strcmp(name, "attention_long")) return ct_nn_causal_self_attention(12, 3, false);
  fail_msg("no module for case %s", name);
  return NULL;
}

typedef struct fixture {
  ct_named_tensor *e;
  int n;
  char file[512];
} fixture;

static ct_tensor *get(const fixture *f, const char *name) {
  for (int i = 0; i < f->n; ++i)
    if (!strcmp(f->e[i].name, name)) return f->e[i].tensor;
  return NULL;
}
static ct_tensor *need(const fixture *f, const char *name) {
  ct_tensor *t = get(f, name);
  if (!t) fail_msg("%s: no tensor \"%s\"", f->file, name);
  return t;
}

static void load_fixture(fixture *f, const char *name) {
  const char *dir = getenv("CT_FIXTURE_DIR");
  if (!dir) fail_msg("CT_FIXTURE_DIR is not set (ctest sets it to tests/fixtures)");
  snprintf(f->file, sizeof f->file, "%s/transformer/%s.safetensors", dir, name);
  TU_OK(ct_load_safetensors(f->file, tu_device, &f->e, &f->n));
}

// A uint8 blob as a string (caller frees).
static char *text(const fixture *f, const char *name) {
  ct_tensor *t = need(f, name);
  const int64_t n = ct_numel(t);
  char *s = calloc((size_t)n + 1, 1);
  if (n) TU_OK(ct_copy_to_host(t, s, (size_t)n));
  return s;
}

static double worst_seen = 0;

static void assert_torch_close(const ct_tensor *got, const ct_tensor *want, const char *what) {
  if (!got) fail_msg("%s: NULL result: %s", what, ct_last_error());
  char a[128], b[128];
  if (!ct_shape_eq(ct_shape_of(got), ct_shape_of(want)))
    fail_msg("%s: shape %s, torch %s", what, ct_shape_str(ct_shape_of(got), a, sizeof a),
             ct_shape_str(ct_shape_of(want), b, sizeof b));
  if (ct_dtype_of(got) != CT_F32) fail_msg("%s: dtype %s, expected float32", what, ct_dtype_name(ct_dtype_of(got)));
  const int64_t n = ct_numel(want);
  double *g = tu_to_f64(got), *w = tu_to_f64(want), big = 0;
  if (!g || !w) fail_msg("%s: could not read tensors back", what);
  for (int64_t i = 0; i < n; ++i) big = fmax(big, fabs(w[i]));
  for (int64_t i = 0; i < n; ++i) {
    const double e = big > 0 ? fabs(g[i] - w[i]) / big : fabs(g[i] - w[i]);
    if (!(e <= 1e-5))
      fail_msg("%s: element %lld of %lld: got %.9g, torch %.9g (relative error %.3g)", what, (long long)i,
               (long long)n, g[i], w[i], e);
    worst_seen = fmax(worst_seen, e);
  }
  free(g), free(w);
}

// The module prints as torch's, lists torch's state_dict keys and parameter
// names, and loads init.* strictly.
static void check_names_and_load(ct_module *m, const fixture *f, const char *name) {
  char *want = text(f, "repr"), *got = ct_module_str(m);
  TU_CHECK(got);
  if (strcmp(got, want)) fail_msg("%s: print(model):\n%s\ntorch:\n%s", name, got, want);
  free(want), free(got);
  for (int params = 0; params < 2; ++params) {
    int n = 0;
    ct_param **ps = params ? ct_module_parameters(m, &n) : ct_module_state(m, &n);
    char *keys = text(f, params ? "param_keys" : "state_keys"), joined[4096] = "";
    for (int i = 0; i < n; ++i) {
      strncat(joined, ps[i]->name, sizeof joined - strlen(joined) - 1);
      if (i + 1 < n) strncat(joined, "\n", sizeof joined - strlen(joined) - 1);
    }
    if (strcmp(joined, keys))
      fail_msg("%s: %s:\n%s\ntorch:\n%s", name, params ? "named_parameters()" : "state_dict() keys", joined, keys);
    free(keys);
  }
  ct_named_tensor init[64];
  int ni = 0;
  for (int i = 0; i < f->n; ++i)
    if (!strncmp(f->e[i].name, "init.", 5)) {
      if (ni == 64) fail_msg("too many init tensors");
      snprintf(init[ni].name, sizeof init[ni].name, "%s", f->e[i].name + 5);
      init[ni++].tensor = f->e[i].tensor;
    }
  TU_OK(ct_module_load_state(m, init, ni, true));
}

static void check_param_grads(ct_module *m, const fixture *f, const char *name) {
  int np = 0;
  ct_param **ps = ct_module_parameters(m, &np);
  char key[160], what[224];
  for (int i = 0; i < np; ++i) {
    snprintf(key, sizeof key, "grad.%s", ps[i]->name);
    snprintf(what, sizeof what, "%s %s", name, key);
    assert_torch_close(ps[i]->grad, need(f, key), what);
  }
}

static void run_module_case(const char *name) {
  fixture f = {0};
  load_fixture(&f, name);
  ct_module *m = build(name);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  check_names_and_load(m, &f, name);
  const bool indices = get(&f, "idx") != NULL;
  ct_tensor *y = ct_module_forward(m, need(&f, indices ? "idx" : "x"));
  char what[160];
  snprintf(what, sizeof what, "%s y", name);
  assert_torch_close(y, need(&f, "y"), what);
  if (indices) {
    TU_OK(ct_module_backward_params(m, need(&f, "grad_out")));
  } else {
    ct_tensor *dx = ct_module_backward(m, need(&f, "grad_out"));
    snprintf(what, sizeof what, "%s grad_in", name);
    assert_torch_close(dx, need(&f, "grad_in"), what);
    ct_free(dx);
  }
  check_param_grads(m, &f, name);
  ct_free(y);
  ct_module_free(m);
  ct_named_tensors_free(f.e, f.n);
}

static void test_modules(void **state) {
  (void)state;
  static const char *const cases[] = {"embedding", "layernorm", "layernorm_eps", "gelu_tanh",
                                      "gelu_none", "softmax",   "attention",     "attention_long"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) run_module_case(cases[i]);
  printf("largest relative error against torch: %.3g\n", worst_seen);
}

static void test_cross_entropy(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f, "cross_entropy");
  ct_tensor *g = NULL;
  ct_tensor *loss = ct_cross_entropy(need(&f, "x"), need(&f, "target"), -100, &g);
  assert_torch_close(loss, need(&f, "loss"), "cross_entropy loss");
  assert_torch_close(g, need(&f, "grad_in"), "cross_entropy dlogits");
  ct_free(loss), ct_free(g);
  ct_named_tensors_free(f.e, f.n);
}

// ---- the GPT block ------------------------------------------------------------------------------
static void check_gpt(tu_gpt *gpt, const fixture *f, const char *what) {
  ct_tensor *loss = NULL, *dl = NULL;
  ct_tensor *logits = tu_gpt_forward(gpt, need(f, "idx"), need(f, "target"), &loss, &dl);
  char w[160];
  snprintf(w, sizeof w, "%s logits", what);
  assert_torch_close(logits, need(f, "y"), w);
  snprintf(w, sizeof w, "%s loss", what);
  assert_torch_close(loss, need(f, "loss"), w);
  TU_OK(ct_module_zero_grad(gpt->root, true));
  tu_gpt_backward(gpt, dl);
  check_param_grads(gpt->root, f, what);
  ct_free(logits), ct_free(loss), ct_free(dl);
}

static tu_gpt new_gpt(void) {
  tu_gpt g;
  tu_gpt_init(&g, 13, 6, 16, 4);
  TU_OK(ct_module_to(g.root, tu_device));
  return g;
}

static void test_gpt_block(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f, "gpt");
  tu_gpt g = new_gpt();
  check_names_and_load(g.root, &f, "gpt");
  check_gpt(&g, &f, "gpt");
  printf("largest relative error against torch, GPT block included: %.3g\n", worst_seen);
  ct_module_free(g.root);
  ct_named_tensors_free(f.e, f.n);
}

// Both tied names share one tensor: writing through one is seen by the other.
static void assert_tied(tu_gpt *g, const char *what) {
  int ns = 0;
  ct_param **st = ct_module_state(g->root, &ns);
  ct_tensor *a = NULL, *b = NULL;
  for (int i = 0; i < ns; ++i) {
    if (!strcmp(st[i]->name, "wte.weight")) a = st[i]->value;
    if (!strcmp(st[i]->name, "lm_head.weight")) b = st[i]->value;
  }
  if (!a || !b || a != b) fail_msg("%s: wte.weight and lm_head.weight are not one tensor", what);
}

static void test_gpt_checkpoint(void **state) {
  (void)state;
  char dir[512];
  if (tu_scratch_dir(dir, sizeof dir, "gpt")) fail_msg("no scratch directory");
  fixture f = {0};
  load_fixture(&f, "gpt");
  tu_gpt a = new_gpt();
  check_names_and_load(a.root, &f, "gpt");
  assert_tied(&a, "after load_state_dict");
  const char *path = tu_scratch_path(dir, "gpt.safetensors");
  TU_OK(ct_module_save(a.root, path));
  // the file holds both names, with equal data
  ct_named_tensor *e = NULL;
  int n = 0;
  TU_OK(ct_load_safetensors(path, ct_device_cpu(), &e, &n));
  const double *w1 = NULL, *w2 = NULL;
  int64_t nw = 0;
  double *keep[2] = {NULL, NULL};
  for (int i = 0; i < n; ++i)
    if (!strcmp(e[i].name, "wte.weight") || !strcmp(e[i].name, "lm_head.weight")) {
      double *v = tu_to_f64(e[i].tensor);
      if (!w1) w1 = keep[0] = v, nw = ct_numel(e[i].tensor);
      else w2 = keep[1] = v;
    }
  if (!w1 || !w2) fail_msg("the checkpoint lacks wte.weight or lm_head.weight");
  if (memcmp(w1, w2, (size_t)nw * sizeof *w1)) fail_msg("the two tied names hold different data");
  free(keep[0]), free(keep[1]);
  // a fresh model loads it and computes torch's numbers, still tied
  tu_gpt b = new_gpt();
  TU_OK(ct_module_load(b.root, path));
  assert_tied(&b, "after ct_module_load");
  check_gpt(&b, &f, "gpt reloaded");
  // one tied name is enough (strict); neither is "Missing key(s)"
  for (int drop = 0; drop < 3; ++drop) {
    ct_named_tensor kept[64];
    int k = 0;
    for (int i = 0; i < n; ++i) {
      const bool wte = !strcmp(e[i].name, "wte.weight"), head = !strcmp(e[i].name, "lm_head.weight");
      if ((drop == 0 && head) || (drop == 1 && wte) || (drop == 2 && (wte || head))) continue;
      kept[k++] = e[i];
    }
    tu_gpt c = new_gpt();
    const int rc = ct_module_load_state(c.root, kept, k, true);
    if (drop < 2) {
      if (rc) fail_msg("a checkpoint without %s did not load: %s", drop ? "wte.weight" : "lm_head.weight", ct_last_error());
      check_gpt(&c, &f, drop ? "gpt without wte.weight" : "gpt without lm_head.weight");
    } else {
      if (!rc) fail_msg("a checkpoint without either tied name loaded");
      tu_assert_error_contains("Missing key(s) in state_dict: \"wte.weight\", \"lm_head.weight\"", "neither tied name");
    }
    ct_module_free(c.root);
  }
  ct_named_tensors_free(e, n);
  ct_module_free(a.root), ct_module_free(b.root);
  ct_named_tensors_free(f.e, f.n);
  tu_scratch_remove(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_modules),
      cmocka_unit_test(test_cross_entropy),
      cmocka_unit_test(test_gpt_block),
      cmocka_unit_test(test_gpt_checkpoint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
