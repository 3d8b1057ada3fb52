// SPDX-License-Identifier: MIT
//
// tu_gpt: a tiny GPT block built from the runtime's modules, for the tests
// that check the transformer layers end to end (test_transformer_gradcheck:
// finite differences; test_transformer_torch: PyTorch's numbers).
//
//   x0 = wte(idx) + wpe(arange(T))            token and position embeddings
//   x1 = x0 + attn(ln_1(x0))                  causal self-attention, residual
//   x2 = x1 + mlp(ln_2(x1))                   Linear(C, 4C), GELU(tanh), Linear(4C, C)
//   logits = lm_head(ln_f(x2))                lm_head.weight is wte.weight (tied)
//   loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-100)
//
// The modules live in one ModuleDict (names as the PyTorch twin in
// tools/fixtures/transformer.py: "wte", "wpe", "ln_1", "attn", "ln_2",
// "mlp", "ln_f", "lm_head"), so its state_dict has torch's keys. Backward is
// written out as autograd would run it: each residual sum passes its
// gradient to both branches; the position embedding's gradient is the sum
// over the batch.
#ifndef CT_TU_GPT_H
#define CT_TU_GPT_H

#include "testutil.h"

typedef struct tu_gpt {
  ct_module *root;
  ct_module *wte, *wpe, *ln_1, *attn, *ln_2, *mlp, *ln_f, *lm_head;
  int64_t v, t, c;
} tu_gpt;

// A block for vocabulary v, length t, width c, nh heads, on the CPU, f32.
static inline void tu_gpt_init(tu_gpt *g, int64_t v, int64_t t, int64_t c, int64_t nh) {
  ct_module *mlp_mods[3] = {ct_nn_linear(c, 4 * c, true), ct_nn_gelu(true), ct_nn_linear(4 * c, c, true)};
  ct_module *mods[8] = {ct_nn_embedding(v, c),   ct_nn_embedding(t, c), ct_nn_layernorm(c, 1e-5),
                        ct_nn_causal_self_attention(c, nh, true), ct_nn_layernorm(c, 1e-5),
                        ct_nn_sequential(3, mlp_mods), ct_nn_layernorm(c, 1e-5), ct_nn_linear(c, v, false)};
  static const char *const names[8] = {"wte", "wpe", "ln_1", "attn", "ln_2", "mlp", "ln_f", "lm_head"};
  g->root = ct_nn_module_dict(8, names, mods);
  TU_CHECK(g->root);
  ct_module **slot[8] = {&g->wte, &g->wpe, &g->ln_1, &g->attn, &g->ln_2, &g->mlp, &g->ln_f, &g->lm_head};
  for (int i = 0; i < 8; ++i) TU_CHECK(*slot[i] = ct_module_get_submodule(g->root, names[i]));
  TU_OK(ct_module_tie(g->lm_head, "weight", g->wte, "weight"));
  g->v = v, g->t = t, g->c = c;
}

// a + b, freeing neither.
static inline ct_tensor *tu_gpt_add(const ct_tensor *a, const ct_tensor *b) {
  ct_tensor *s = ct_add(a, b);
  TU_CHECK(s);
  return s;
}

// Forward on idx (B, T) int64: the logits (B, T, V); when targets is not
// NULL, *loss gets the mean cross-entropy and *dlogits its gradient.
static inline ct_tensor *tu_gpt_forward(tu_gpt *g, const ct_tensor *idx, const ct_tensor *targets,
                                        ct_tensor **loss, ct_tensor **dlogits) {
  const ct_device dev = ct_device_of(idx);
  const int64_t T = ct_size(idx, 1);
  ct_tensor *pos = ct_arange(0, (double)T, 1, CT_I64, dev);
  TU_CHECK(pos);
  ct_tensor *tok = ct_module_forward(g->wte, idx), *pe = ct_module_forward(g->wpe, pos);
  TU_CHECK(tok);
  TU_CHECK(pe);
  ct_tensor *x0 = tu_gpt_add(tok, pe);
  ct_tensor *h1 = ct_module_forward(g->ln_1, x0);
  TU_CHECK(h1);
  ct_tensor *a = ct_module_forward(g->attn, h1);
  TU_CHECK(a);
  ct_tensor *x1 = tu_gpt_add(x0, a);
  ct_tensor *h2 = ct_module_forward(g->ln_2, x1);
  TU_CHECK(h2);
  ct_tensor *mo = ct_module_forward(g->mlp, h2);
  TU_CHECK(mo);
  ct_tensor *x2 = tu_gpt_add(x1, mo);
  ct_tensor *h3 = ct_module_forward(g->ln_f, x2);
  TU_CHECK(h3);
  ct_tensor *logits = ct_module_forward(g->lm_head, h3);
  TU_CHECK(logits);
  if (targets) {
    *loss = ct_cross_entropy(logits, targets, -100, dlogits);
    TU_CHECK(*loss);
  }
  ct_free(pos), ct_free(tok), ct_free(pe), ct_free(x0), ct_free(h1), ct_free(a), ct_free(x1), ct_free(h2);
  ct_free(mo), ct_free(x2), ct_free(h3);
  return logits;
}

// Backward from dL/dlogits of the last training forward: every parameter's
// grad accumulated (the tied weight gets lm_head's and wte's terms).
static inline void tu_gpt_backward(tu_gpt *g, const ct_tensor *dlogits) {
  ct_tensor *dh3 = ct_module_backward(g->lm_head, dlogits);
  TU_CHECK(dh3);
  ct_tensor *dx2 = ct_module_backward(g->ln_f, dh3);
  TU_CHECK(dx2);
  ct_tensor *dh2 = ct_module_backward(g->mlp, dx2);
  TU_CHECK(dh2);
  ct_tensor *dl2 = ct_module_backward(g->ln_2, dh2);
  TU_CHECK(dl2);
  ct_tensor *dx1 = tu_gpt_add(dx2, dl2);
  ct_tensor *dh1 = ct_module_backward(g->attn, dx1);
  TU_CHECK(dh1);
  ct_tensor *dl1 = ct_module_backward(g->ln_1, dh1);
  TU_CHECK(dl1);
  ct_tensor *dx0 = tu_gpt_add(dx1, dl1);
  TU_OK(ct_module_backward_params(g->wte, dx0));
  ct_tensor *dpos = ct_sum_dim(dx0, 0, false); // (T, C): the batch shared one position table
  TU_CHECK(dpos);
  TU_OK(ct_module_backward_params(g->wpe, dpos));
  ct_free(dh3), ct_free(dx2), ct_free(dh2), ct_free(dl2), ct_free(dx1), ct_free(dh1), ct_free(dl1);
  ct_free(dx0), ct_free(dpos);
}

#endif
