// SPDX-License-Identifier: MIT
//
// test_gpt_amp: a GPT block (tests/tu_gpt.h) trained under autocast, on the
// device under test.
//
// References: tests/fixtures/gpt_amp/gpt_bf16.safetensors (CUDA's op lists,
// for a CUDA device under test) and gpt_bf16_cpu.safetensors (the CPU's,
// for the CPU), written by tools/fixtures/gpt_amp.py with PyTorch 2.x's
// lists: the block's loss, logits and every parameter gradient under
// bfloat16 autocast as PyTorch computes them, each op in float32 rounded
// once as the runtime's kernels do (torch's own CPU bfloat16 kernels round
// inside: see that script), the dtype of each intermediate (attention's
// probabilities: float32 on CUDA, bfloat16 on the CPU), and the same step in
// float64. Checked:
//   - bfloat16: loss, logits and every gradient within 2e-3 of torch's in the
//     max norm (half of bfloat16's epsilon, 2^-8: the two round the same
//     values, so only a product summed in another order may round the other
//     way), the gradients float32, and the step measurably away from
//     float64's (so the comparison is not one with a float32 run);
//   - the dtype of every intermediate equals torch's (the table test);
//   - backward inside or outside the autocast region: the same bits (the
//     modules keep the dtypes their forward chose);
//   - float16 autocast (PyTorch 1.13 has none on the CPU: CPU autocast is
//     bfloat16 only and its CPU matmul has no float16) against float64,
//     within 4e-3 (float16's epsilon is 2^-11), and bfloat16 within 3e-2;
//   - each module's boundary casts: the LM cross-entropy, and on CUDA
//     LayerNorm and Softmax, widen half precision to float32 under autocast
//     and hand dx back in the input's dtype (on the CPU LayerNorm and Softmax
//     answer in the input's dtype, rounded once from float32); attention and
//     GELU take a gradient of another dtype;
//   - GradScaler with the tied weight: unscale_ then clip_grad_norm_ (torch's
//     recommended order) give float64's gradients and norm, each parameter
//     counted once, and step applies the clipped gradients;
//   - a whole training step under autocast (bfloat16; float16 with the
//     GradScaler) captured as a graph and replayed on new batches: the eager
//     steps' losses, parameters and scale, bit for bit.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_impl.h"
#include "testutil.h"
#include "tu_gpt.h"
#include "tu_ref.h"

// ---- the fixture --------------------------------------------------------------------------------
typedef struct fixture {
  ct_named_tensor *e;
  int n;
  char file[512];
} fixture;

static ct_tensor *need(const fixture *f, const char *name) {
  for (int i = 0; i < f->n; ++i)
    if (!strcmp(f->e[i].name, name)) return f->e[i].tensor;
  fail_msg("%s: no tensor \"%s\"", f->file, name);
  return NULL;
}

static void load_fixture(fixture *f) {
  const char *dir = getenv("CT_FIXTURE_DIR");
  if (!dir) fail_msg("CT_FIXTURE_DIR is not set (ctest sets it to tests/fixtures)");
  snprintf(f->file, sizeof f->file, "%s/gpt_amp/gpt_bf16%s.safetensors", dir, tu_device.type == CT_CPU ? "_cpu" : "");
  TU_OK(ct_load_safetensors(f->file, tu_device, &f->e, &f->n));
}

static void free_fixture(fixture *f) {
  for (int i = 0; i < f->n; ++i) ct_free(f->e[i].tensor);
  free(f->e);
}

// The block of the fixture (V 13, T 6, C 16, 4 heads) with its init.* weights, on tu_device.
static tu_gpt new_gpt(const fixture *f) {
  tu_gpt g;
  tu_gpt_init(&g, 13, 6, 16, 4);
  ct_named_tensor init[64];
  int ni = 0;
  for (int i = 0; i < f->n && ni < 64; ++i)
    if (!strncmp(f->e[i].name, "init.", 5)) {
      snprintf(init[ni].name, sizeof init[ni].name, "%s", f->e[i].name + 5);
      init[ni++].tensor = f->e[i].tensor;
    }
  TU_OK(ct_module_load_state(g.root, init, ni, true));
  TU_OK(ct_module_to(g.root, tu_device));
  return g;
}

// max |got - want| / max |want|: the error in the max norm.
static double max_norm_err(const ct_tensor *got, const ct_tensor *want, const char *what) {
  if (!got) fail_msg("%s: NULL: %s", what, ct_last_error());
  if (ct_numel(got) != ct_numel(want)) fail_msg("%s: %lld elements, expected %lld", what, (long long)ct_numel(got),
                                                (long long)ct_numel(want));
  double *g = tu_to_f64(got), *w = tu_to_f64(want), big = 0, err = 0;
  for (int64_t i = 0; i < ct_numel(want); ++i) big = fmax(big, fabs(w[i]));
  for (int64_t i = 0; i < ct_numel(want); ++i) {
    const double e = fabs(g[i] - w[i]);
    err = e > err || isnan(e) ? e : err;
  }
  free(g), free(w);
  return big > 0 ? err / big : err;
}

static void assert_close(const ct_tensor *got, const ct_tensor *want, double tol, const char *what) {
  const double e = max_norm_err(got, want, what);
  if (!(e <= tol)) fail_msg("%s: max-norm error %.3g > %.3g", what, e, tol);
}

// One training step of the block under autocast(dt) (backward outside the
// region unless backward_inside): grads from zero; returns the loss, *logits too.
static ct_tensor *amp_step(tu_gpt *g, const fixture *f, ct_dtype dt, bool backward_inside, ct_tensor **logits) {
  ct_tensor *loss = NULL, *dl = NULL;
  TU_OK(ct_module_zero_grad(g->root, true));
  TU_OK(ct_autocast_enter(tu_device.type, dt, true));
  *logits = tu_gpt_forward(g, need(f, "idx"), need(f, "target"), &loss, &dl);
  if (!backward_inside) TU_OK(ct_autocast_exit());
  tu_gpt_backward(g, dl);
  if (backward_inside) TU_OK(ct_autocast_exit());
  ct_free(dl);
  return loss;
}

// Every parameter's grad (float32, master weights) against the fixture's `prefix`grad.NAME.
static double grads_err(ct_module *root, const fixture *f, const char *prefix, double tol, const char *what) {
  int np = 0;
  ct_param **ps = ct_module_parameters(root, &np);
  double worst = 0;
  char key[160], w[256];
  for (int i = 0; i < np; ++i) {
    snprintf(key, sizeof key, "%sgrad.%s", prefix, ps[i]->name);
    snprintf(w, sizeof w, "%s: %s", what, key);
    ref_assert_dtype(ps[i]->grad, CT_F32, w);
    const double e = max_norm_err(ps[i]->grad, need(f, key), w);
    if (!(e <= tol)) fail_msg("%s: max-norm error %.3g > %.3g", w, e, tol);
    worst = fmax(worst, e);
  }
  return worst;
}

// ---- bfloat16 against PyTorch ---------------------------------------------------------------------
#define TOL_TORCH_BF16 2e-3

static void test_bf16_vs_torch(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f);
  tu_gpt g = new_gpt(&f);
  ct_tensor *logits = NULL, *loss = amp_step(&g, &f, CT_BF16, false, &logits);
  ref_assert_dtype(logits, CT_BF16, "logits under autocast(bfloat16)");
  ref_assert_dtype(loss, CT_F32, "loss under autocast(bfloat16)");
  const double el = max_norm_err(loss, need(&f, "loss"), "loss");
  const double eo = max_norm_err(logits, need(&f, "logits"), "logits");
  if (!(el <= TOL_TORCH_BF16 && eo <= TOL_TORCH_BF16))
    fail_msg("bf16 step vs torch: loss error %.3g, logits %.3g (> %.3g)", el, eo, TOL_TORCH_BF16);
  const double eg = grads_err(g.root, &f, "", TOL_TORCH_BF16, "bf16 vs torch");
  // the same step against float64: torch's bfloat16 is this far away too, so the
  // comparison above measures more than agreement with a float32 run
  const double e64 = grads_err(g.root, &f, "f64.", 3e-2, "bf16 vs float64");
  printf("bf16 autocast step vs torch: loss %.2g, logits %.2g, grads %.2g (vs float64: grads %.2g)\n", el, eo, eg,
         e64);
  if (!(e64 > 2 * eg)) fail_msg("bf16 vs float64 (%.3g) should be far from bf16 vs torch (%.3g)", e64, eg);
  ct_free(logits), ct_free(loss);
  ct_module_free(g.root);
  free_fixture(&f);
}

// Backward inside the region gives the bits backward outside it gives.
static void test_backward_region(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f);
  tu_gpt a = new_gpt(&f), b = new_gpt(&f);
  ct_tensor *la = NULL, *lb = NULL;
  ct_tensor *loss_a = amp_step(&a, &f, CT_BF16, false, &la), *loss_b = amp_step(&b, &f, CT_BF16, true, &lb);
  int np = 0;
  ct_param **pa = ct_module_parameters(a.root, &np), **pb = ct_module_parameters(b.root, &np);
  for (int i = 0; i < np; ++i) {
    double *x = tu_to_f64(pa[i]->grad), *y = tu_to_f64(pb[i]->grad);
    for (int64_t e = 0; e < ct_numel(pa[i]->grad); ++e)
      if (x[e] != y[e]) fail_msg("%s grad element %lld: %.9g outside the region, %.9g inside", pa[i]->name,
                                 (long long)e, x[e], y[e]);
    free(x), free(y);
  }
  ct_free(la), ct_free(lb), ct_free(loss_a), ct_free(loss_b);
  ct_module_free(a.root), ct_module_free(b.root);
  free_fixture(&f);
}

// ---- the dtype table ------------------------------------------------------------------------------
// Forward hooks write the dtype of each intermediate under the fixture's name.
#define MAX_SEEN 32
static struct {
  char name[32];
  ct_dtype dt;
} seen[MAX_SEEN];
static int n_seen;

static void note(const char *name, const ct_tensor *t) {
  if (n_seen < MAX_SEEN && t) {
    snprintf(seen[n_seen].name, sizeof seen[n_seen].name, "%s", name);
    seen[n_seen++].dt = ct_dtype_of(t);
  }
}

// ctx: "IN_NAME OUT_NAME" ("-" for none).
static void dtype_hook(ct_module *m, const ct_tensor *in, const ct_tensor *out, void *ctx) {
  (void)m;
  char a[32], b[32];
  if (sscanf((const char *)ctx, "%31s %31s", a, b) != 2) return;
  if (strcmp(a, "-")) note(a, in);
  if (strcmp(b, "-")) note(b, out);
}

static const char *dtype_torch_name(ct_dtype dt) {
  return dt == CT_F32 ? "float32" : dt == CT_BF16 ? "bfloat16" : dt == CT_F16 ? "float16" : ct_dtype_name(dt);
}

static void test_dtype_table(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f);
  tu_gpt g = new_gpt(&f);
  // where each of torch's intermediates shows in ct: a module's input or output
  static const char *const hooks[][2] = {
      {"wte", "- tok"},           {"wpe", "- pos"},         {"ln_1", "x0 ln_1"}, {"attn.c_attn", "- attn.qkv"},
      {"attn.c_proj", "attn.heads -"}, {"attn", "- attn"},  {"ln_2", "x1 ln_2"}, {"mlp.0", "- mlp.fc"},
      {"mlp.1", "- mlp.gelu"},    {"mlp", "- mlp"},         {"ln_f", "x2 ln_f"}, {"lm_head", "- logits"},
  };
  for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; ++i) {
    ct_module *m = ct_module_get_submodule(g.root, hooks[i][0]);
    TU_CHECK(m);
    ct_module_register_forward_hook(m, dtype_hook, (void *)hooks[i][1]);
  }
  n_seen = 0;
  ct_tensor *logits = NULL, *loss = amp_step(&g, &f, CT_BF16, false, &logits);
  note("loss", loss);
  // q k^T: ct_bmm answers in its operands' dtype, q's and k's (c_attn's output's)
  for (int i = 0; i < n_seen; ++i)
    if (!strcmp(seen[i].name, "attn.qkv") && n_seen < MAX_SEEN) {
      snprintf(seen[n_seen].name, sizeof seen[n_seen].name, "attn.scores");
      seen[n_seen++].dt = seen[i].dt;
    }
  note("attn.probs", cti_attention_probs(ct_module_get_submodule(g.root, "attn")));
  // torch's table, line by line
  ct_tensor *blob = need(&f, "dtypes");
  char *text = calloc((size_t)ct_numel(blob) + 1, 1);
  TU_OK(ct_copy_to_host(blob, text, (size_t)ct_numel(blob)));
  int rows = 0;
  printf("%-12s %-9s %s\n", "tensor", "torch", "ct");
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), ++rows) {
    char name[32], want[16];
    if (sscanf(line, "%31s %15s", name, want) != 2) fail_msg("fixture dtypes: bad line \"%s\"", line);
    const char *got = NULL;
    for (int i = 0; i < n_seen && !got; ++i)
      if (!strcmp(seen[i].name, name)) got = dtype_torch_name(seen[i].dt);
    printf("%-12s %-9s %s\n", name, want, got ? got : "(not seen)");
    if (!got || strcmp(got, want)) fail_msg("%s: ct computes it in %s, torch in %s", name, got ? got : "nothing", want);
  }
  if (rows != 18) fail_msg("fixture dtypes: %d rows, expected 18", rows);
  free(text);
  ct_free(logits), ct_free(loss);
  ct_module_free(g.root);
  free_fixture(&f);
}

// ---- float16 (and bfloat16) against float64 --------------------------------------------------------
static void test_lowp_vs_f64(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f);
  static const ct_dtype dts[2] = {CT_F16, CT_BF16};
  static const double tol[2] = {4e-3, 3e-2};
  for (int k = 0; k < 2; ++k) {
    tu_gpt g = new_gpt(&f);
    ct_tensor *logits = NULL, *loss = amp_step(&g, &f, dts[k], false, &logits);
    ref_assert_dtype(logits, dts[k], "logits");
    ref_assert_dtype(loss, CT_F32, "loss");
    char what[64];
    snprintf(what, sizeof what, "%s autocast vs float64", ct_dtype_name(dts[k]));
    assert_close(loss, need(&f, "f64.loss"), tol[k], what);
    assert_close(logits, need(&f, "f64.logits"), tol[k], what);
    printf("%s: grads within %.2g of float64\n", what, grads_err(g.root, &f, "f64.", tol[k], what));
    ct_free(logits), ct_free(loss);
    ct_module_free(g.root);
  }
  free_fixture(&f);
}

// ---- each module's boundary ------------------------------------------------------------------------
static ct_tensor *rand_tensor(ct_shape s, ct_dtype dt) {
  double *x;
  ct_tensor *t = ref_tensor(s, dt, tu_device, -2, 2, &x);
  free(x);
  TU_CHECK(t);
  return t;
}

// m's forward on x under autocast(bf16), then backward of g (any dtype) outside it.
static ct_tensor *boundary(ct_module *m, const ct_tensor *x, const ct_tensor *g, ct_dtype want_y, ct_dtype want_dx,
                           const char *what) {
  TU_OK(ct_module_to(m, tu_device));
  TU_OK(ct_autocast_enter(tu_device.type, CT_BF16, true));
  ct_tensor *y = ct_module_forward(m, x);
  TU_OK(ct_autocast_exit());
  TU_CHECK(y);
  char w[96];
  snprintf(w, sizeof w, "%s: y", what);
  ref_assert_dtype(y, want_y, w);
  ct_tensor *dx = ct_module_backward(m, g);
  TU_CHECK(dx);
  snprintf(w, sizeof w, "%s: dx", what);
  ref_assert_dtype(dx, want_dx, w);
  ct_free(dx);
  return y;
}

// The same module outside autocast on x widened to float32, and grad g in float32: y and dx.
static void widened(ct_module *m, const ct_tensor *x, const ct_tensor *g, ct_tensor **y, ct_tensor **dx) {
  ct_tensor *xw = ct_to_dtype(x, CT_F32), *gw = ct_to_dtype(g, CT_F32);
  *y = ct_module_forward(m, xw);
  *dx = ct_module_backward(m, gw);
  TU_CHECK(*y);
  TU_CHECK(*dx);
  ct_free(xw), ct_free(gw);
}

static void assert_same_bits(const ct_tensor *a, const ct_tensor *b, const char *what) {
  double *x = tu_to_f64(a), *y = tu_to_f64(b);
  for (int64_t i = 0; i < ct_numel(a); ++i)
    if (!(x[i] == y[i])) fail_msg("%s: element %lld: %.9g vs %.9g", what, (long long)i, x[i], y[i]);
  free(x), free(y);
}

// dx of a softmax over the last dim from its output y and gradient g, in float64:
// dx within bfloat16's rounding (2^-8 relative; float32 arithmetic adds little) of y (g - sum y g).
static void assert_softmax_dx_from(const ct_tensor *dx, const ct_tensor *y, const ct_tensor *g) {
  const int64_t c = ct_size(y, -1), n = ct_numel(y);
  double *d = tu_to_f64(dx), *p = tu_to_f64(y), *q = tu_to_f64(g);
  for (int64_t r = 0; r < n; r += c) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += p[r + j] * q[r + j];
    for (int64_t j = 0; j < c; ++j) {
      const double want = p[r + j] * (q[r + j] - s);
      if (!(fabs(d[r + j] - want) <= 0x1p-8 * fabs(want) + 1e-6))
        fail_msg("Softmax dx element %lld: %.9g, from its bf16 y %.9g in float64", (long long)(r + j), d[r + j], want);
    }
  }
  free(d), free(p), free(q);
}

static void test_module_boundaries(void **state) {
  (void)state;
  // LayerNorm and Softmax: bf16 in; on CUDA (float32 list) f32 out, the f32 module's numbers on
  // the widened input; on the CPU (on no list) bf16 out, those numbers rounded once. dx in bf16,
  // rounded from the f32 module's dx (g holds bf16 values: the CPU rounds g to y's dtype first),
  // except the CPU's Softmax, whose backward starts from its bf16 y, as torch's does.
  const bool cpu = tu_device.type == CT_CPU;
  ct_module *fp32_mods[2] = {ct_nn_layernorm(24, 1e-5), ct_nn_softmax(-1)};
  const char *names[2] = {"LayerNorm", "Softmax"};
  for (int k = 0; k < 2; ++k) {
    ct_tensor *x = rand_tensor(CT_SHAPE(3, 5, 24), CT_BF16), *gb = rand_tensor(CT_SHAPE(3, 5, 24), CT_BF16);
    ct_tensor *g = ct_to_dtype(gb, CT_F32);
    ct_free(gb);
    ct_tensor *y = boundary(fp32_mods[k], x, g, cpu ? CT_BF16 : CT_F32, CT_BF16, names[k]);
    ct_tensor *yw = NULL, *dxw = NULL;
    widened(fp32_mods[k], x, g, &yw, &dxw);
    ct_tensor *ywr = ct_to_dtype(yw, ct_dtype_of(y));
    assert_same_bits(y, ywr, names[k]);
    ct_free(ywr);
    TU_OK(ct_autocast_enter(tu_device.type, CT_BF16, true)); // again: widened() replaced the saved forward
    ct_tensor *y2 = ct_module_forward(fp32_mods[k], x);
    TU_OK(ct_autocast_exit());
    ct_tensor *dx = ct_module_backward(fp32_mods[k], g), *dxr = ct_to_dtype(dxw, CT_BF16);
    if (cpu && k == 1)
      assert_softmax_dx_from(dx, y, g);
    else
      assert_same_bits(dx, dxr, names[k]); // dx = the f32 dx rounded once
    ct_free(dx), ct_free(dxr), ct_free(y2);
    ct_free(x), ct_free(g), ct_free(y), ct_free(yw), ct_free(dxw);
    ct_module_free(fp32_mods[k]);
  }
  // outside autocast a bf16 activation into a float32 LayerNorm: torch 2.x's mixed type on the
  // CPU (bf16 out); on CUDA ct has no mixed type: a dtype error, with the fix
  ct_module *ln = ct_nn_layernorm(8, 1e-5);
  TU_OK(ct_module_to(ln, tu_device));
  ct_tensor *xb = rand_tensor(CT_SHAPE(2, 8), CT_BF16), *yb = ct_module_forward(ln, xb);
  if (cpu) {
    TU_CHECK(yb);
    ref_assert_dtype(yb, CT_BF16, "LayerNorm bf16 input outside autocast on the CPU");
  } else {
    assert_null(yb);
    tu_assert_error_contains("under autocast", "LayerNorm bf16 input outside autocast");
  }
  ct_free(xb), ct_free(yb), ct_module_free(ln);
  // Softmax outside autocast on bf16: bf16, the f32 softmax rounded once
  ct_tensor *s16 = rand_tensor(CT_SHAPE(4, 9), CT_BF16), *s32 = ct_to_dtype(s16, CT_F32);
  ct_tensor *p16 = ct_softmax(s16, -1), *p32 = ct_softmax(s32, -1), *p32r = ct_to_dtype(p32, CT_BF16);
  ref_assert_dtype(p16, CT_BF16, "softmax of bf16 outside autocast");
  assert_same_bits(p16, p32r, "softmax of bf16 outside autocast");
  ct_free(s16), ct_free(s32), ct_free(p16), ct_free(p32), ct_free(p32r);
  // the LM cross-entropy: bf16 logits -> f32 loss and grad under autocast (the f32 numbers of
  // the widened logits), bf16 outside it
  ct_tensor *lg = rand_tensor(CT_SHAPE(2, 3, 11), CT_BF16), *lw = ct_to_dtype(lg, CT_F32);
  ct_tensor *tgt = ct_from_host((int64_t[]){0, 10, -100, 3, 2, 5}, CT_SHAPE(2, 3), CT_I64, ct_device_cpu());
  ct_tensor *tg = ct_to_device(tgt, tu_device);
  ct_tensor *gw = NULL, *ga = NULL, *go = NULL;
  ct_tensor *lossw = ct_cross_entropy(lw, tg, -100, &gw);
  TU_OK(ct_autocast_enter(tu_device.type, CT_BF16, true));
  ct_tensor *lossa = ct_cross_entropy(lg, tg, -100, &ga);
  TU_OK(ct_autocast_exit());
  ct_tensor *losso = ct_cross_entropy(lg, tg, -100, &go);
  TU_CHECK(lossw);
  TU_CHECK(lossa);
  TU_CHECK(losso);
  ref_assert_dtype(lossa, CT_F32, "cross_entropy loss under autocast");
  ref_assert_dtype(ga, CT_F32, "cross_entropy grad under autocast");
  ref_assert_dtype(losso, CT_BF16, "cross_entropy loss outside autocast");
  ref_assert_dtype(go, CT_BF16, "cross_entropy grad outside autocast");
  assert_same_bits(lossa, lossw, "cross_entropy loss under autocast");
  assert_same_bits(ga, gw, "cross_entropy grad under autocast");
  ct_free(lg), ct_free(lw), ct_free(tgt), ct_free(tg), ct_free(gw), ct_free(ga), ct_free(go);
  ct_free(lossw), ct_free(lossa), ct_free(losso);
  // attention: f32 in, bf16 out (c_proj is a Linear); a float32 grad (the residual's) is cast
  // to bf16 at the boundary; dx in x's float32
  ct_module *attn = ct_nn_causal_self_attention(16, 4, true);
  ct_tensor *xa = rand_tensor(CT_SHAPE(2, 5, 16), CT_F32), *gf = rand_tensor(CT_SHAPE(2, 5, 16), CT_F32);
  ct_tensor *ya = boundary(attn, xa, gf, CT_BF16, CT_F32, "CausalSelfAttention");
  ref_assert_dtype(cti_attention_probs(attn), cpu ? CT_BF16 : CT_F32, "attention probabilities under autocast");
  ct_free(xa), ct_free(gf), ct_free(ya), ct_module_free(attn);
  // GELU follows its input: bf16 in and out; a float32 grad is cast to bf16
  ct_module *gelu = ct_nn_gelu(true);
  ct_tensor *xg = rand_tensor(CT_SHAPE(4, 7), CT_BF16), *gg = rand_tensor(CT_SHAPE(4, 7), CT_F32);
  ct_tensor *yg = boundary(gelu, xg, gg, CT_BF16, CT_BF16, "GELU");
  ct_free(xg), ct_free(gg), ct_free(yg), ct_module_free(gelu);
}

// ---- GradScaler, the tied weight, clip_grad_norm_ ---------------------------------------------------
static void test_scaler_clip_tied(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f);
  tu_gpt g = new_gpt(&f);
  int np = 0;
  ct_param **ps = ct_module_parameters(g.root, &np); // the tied weight once, as wte.weight
  const double lr = 0.1, max_norm = 0.5;
  ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(lr));
  ct_grad_scaler_options so = ct_grad_scaler_defaults();
  so.init_scale = 1024.0;
  ct_grad_scaler *sc = ct_grad_scaler_create(tu_device.type, so);
  TU_CHECK(opt);
  TU_CHECK(sc);
  ct_tensor *loss = NULL, *dl = NULL;
  TU_OK(ct_optimizer_zero_grad(opt, true));
  TU_OK(ct_autocast_enter(tu_device.type, CT_F16, true));
  ct_tensor *logits = tu_gpt_forward(&g, need(&f, "idx"), need(&f, "target"), &loss, &dl);
  TU_OK(ct_autocast_exit());
  ct_tensor *scaled = ct_grad_scaler_scale(sc, dl); // loss * scale, as dL/dlogits * scale
  TU_CHECK(scaled);
  tu_gpt_backward(&g, scaled);
  TU_OK(ct_grad_scaler_unscale_(sc, opt));
  // unscaled once: float64's gradients (the tied one too: lm_head's and wte's terms, once)
  grads_err(g.root, &f, "f64.", 4e-3, "f16 + GradScaler, after unscale_");
  double ref_sq = 0, total = 0;
  char key[160];
  for (int i = 0; i < np; ++i) {
    snprintf(key, sizeof key, "f64.grad.%s", ps[i]->name);
    double *r = tu_to_f64(need(&f, key));
    for (int64_t e = 0; e < ct_numel(ps[i]->value); ++e) ref_sq += r[e] * r[e];
    free(r);
  }
  TU_OK(ct_clip_grad_norm_(ps, np, max_norm, &total));
  if (!(fabs(total - sqrt(ref_sq)) <= 4e-3 * sqrt(ref_sq)))
    fail_msg("clip_grad_norm_ after unscale_: total norm %.6g, float64's %.6g", total, sqrt(ref_sq));
  if (!(total > max_norm)) fail_msg("the test wants clipping to act: total norm %.3g <= %.3g", total, max_norm);
  // step: w -= lr * clipped grad, every parameter once
  double **before = calloc((size_t)np, sizeof *before), **grad = calloc((size_t)np, sizeof *grad);
  for (int i = 0; i < np; ++i) before[i] = tu_to_f64(ps[i]->value), grad[i] = tu_to_f64(ps[i]->grad);
  TU_OK(ct_grad_scaler_step(sc, opt));
  TU_OK(ct_grad_scaler_update(sc));
  double clipped_sq = 0;
  for (int i = 0; i < np; ++i) {
    double *after = tu_to_f64(ps[i]->value);
    for (int64_t e = 0; e < ct_numel(ps[i]->value); ++e) {
      const double want = before[i][e] - lr * grad[i][e];
      clipped_sq += grad[i][e] * grad[i][e];
      if (!(fabs(after[e] - want) <= 1e-6 * (1 + fabs(want))))
        fail_msg("%s element %lld after the step: %.9g, expected %.9g", ps[i]->name, (long long)e, after[e], want);
    }
    free(after), free(before[i]), free(grad[i]);
  }
  free(before), free(grad);
  if (!(fabs(sqrt(clipped_sq) - max_norm) <= 1e-5 * max_norm))
    fail_msg("clipped grads have norm %.7g, max_norm %.7g", sqrt(clipped_sq), max_norm);
  // the tie holds through the step: lm_head reads the updated wte.weight
  int ns = 0;
  ct_param **st = ct_module_state(g.root, &ns);
  const ct_tensor *wte = NULL, *head = NULL;
  for (int i = 0; i < ns; ++i) {
    if (!strcmp(st[i]->name, "wte.weight")) wte = st[i]->value;
    if (!strcmp(st[i]->name, "lm_head.weight")) head = st[i]->value;
  }
  if (!wte || wte != head) fail_msg("lm_head.weight is no longer wte.weight after the step");
  double s = 0;
  int64_t tracker = -1;
  TU_OK(ct_grad_scaler_get_scale(sc, &s));
  TU_OK(ct_grad_scaler_get_growth_tracker(sc, &tracker));
  if (s != 1024.0 || tracker != 1) fail_msg("scale %g, tracker %lld after one clean step", s, (long long)tracker);
  ct_free(loss), ct_free(dl), ct_free(scaled), ct_free(logits);
  ct_grad_scaler_free(sc);
  ct_optimizer_free(opt);
  ct_module_free(g.root);
  free_fixture(&f);
}

// ---- a training step captured under autocast -------------------------------------------------------
// The whole step (zero_grad, forward under autocast with its casts, backward,
// the GradScaler's scale/unscale_/step/update, SGD) captured once and
// replayed on new batches copied into static tensors: the same losses and
// parameters, bit for bit, as the same steps run eagerly (graph.h's promise;
// on the CPU the recorder replays the calls, on CUDA stream capture).
#define CAP_WARMUP 2
#define CAP_STEPS 4

static ct_tensor *tokens(int64_t hi) {
  int64_t v[3 * 6];
  double u[3 * 6];
  tu_fill_uniform(u, 3 * 6, 0, (double)hi);
  for (int i = 0; i < 3 * 6; ++i) v[i] = (int64_t)u[i];
  ct_tensor *t = ct_from_host(v, CT_SHAPE(3, 6), CT_I64, tu_device);
  TU_CHECK(t);
  return t;
}

typedef struct amp_trainer {
  tu_gpt g;
  ct_optimizer *opt;
  ct_grad_scaler *scaler; // float16 only
  ct_dtype dt;
} amp_trainer;

static amp_trainer trainer(const fixture *f, ct_dtype dt) {
  amp_trainer t = {.g = new_gpt(f), .dt = dt};
  int np = 0;
  ct_param **ps = ct_module_parameters(t.g.root, &np);
  ct_sgd_options o = ct_sgd_defaults(0.05);
  o.momentum = 0.9;
  TU_CHECK(t.opt = ct_optim_sgd(ps, np, o));
  ct_grad_scaler_options so = ct_grad_scaler_defaults();
  so.init_scale = 1024.0;
  so.growth_interval = 3; // a growth within the replays
  so.enabled = dt == CT_F16;
  TU_CHECK(t.scaler = ct_grad_scaler_create(tu_device.type, so));
  return t;
}

static ct_tensor *trainer_step(amp_trainer *t, const ct_tensor *idx, const ct_tensor *tgt) {
  ct_tensor *loss = NULL, *dl = NULL;
  TU_OK(ct_optimizer_zero_grad(t->opt, true));
  TU_OK(ct_autocast_enter(tu_device.type, t->dt, true));
  ct_tensor *logits = tu_gpt_forward(&t->g, idx, tgt, &loss, &dl);
  TU_OK(ct_autocast_exit());
  ct_tensor *scaled = ct_grad_scaler_scale(t->scaler, dl);
  TU_CHECK(scaled);
  tu_gpt_backward(&t->g, scaled);
  TU_OK(ct_grad_scaler_unscale_(t->scaler, t->opt));
  int np = 0;
  ct_param **ps = ct_module_parameters(t->g.root, &np);
  TU_OK(ct_clip_grad_norm_(ps, np, 1.0, NULL));
  TU_OK(ct_grad_scaler_step(t->scaler, t->opt));
  TU_OK(ct_grad_scaler_update(t->scaler));
  ct_free(logits), ct_free(dl), ct_free(scaled);
  return loss;
}

static void trainer_free(amp_trainer *t) {
  ct_grad_scaler_free(t->scaler);
  ct_optimizer_free(t->opt);
  ct_module_free(t->g.root);
}

static void capture_case(const fixture *f, ct_dtype dt) {
  amp_trainer eager = trainer(f, dt), graphed = trainer(f, dt);
  ct_tensor *xs[CAP_WARMUP + CAP_STEPS], *ys[CAP_WARMUP + CAP_STEPS];
  for (int i = 0; i < CAP_WARMUP + CAP_STEPS; ++i) xs[i] = tokens(13), ys[i] = tokens(13);
  ct_stream *side = ct_stream_create(tu_device, 0), *def = ct_current_stream(tu_device);
  TU_CHECK(side);
  double eager_loss[CAP_STEPS];
  TU_OK(ct_set_stream(side)); // warm-up on a side stream, as torch.cuda.graphs asks
  for (int i = 0; i < CAP_WARMUP + CAP_STEPS; ++i) {
    ct_tensor *l = trainer_step(&eager, xs[i], ys[i]);
    if (i >= CAP_WARMUP) TU_OK(ct_item(l, &eager_loss[i - CAP_WARMUP]));
    ct_free(l);
  }
  ct_tensor *sx = ct_empty(CT_SHAPE(3, 6), CT_I64, tu_device), *sy = ct_empty(CT_SHAPE(3, 6), CT_I64, tu_device);
  TU_CHECK(sx);
  TU_CHECK(sy);
  for (int i = 0; i < CAP_WARMUP; ++i) {
    TU_OK(ct_copy_(sx, xs[i], false));
    TU_OK(ct_copy_(sy, ys[i], false));
    ct_free(trainer_step(&graphed, sx, sy));
  }
  TU_OK(ct_stream_synchronize(side));
  TU_OK(ct_set_stream(def));
  TU_OK(ct_stream_wait_stream(def, side));
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  ct_tensor *sloss = trainer_step(&graphed, sx, sy);
  TU_OK(ct_cuda_graph_capture_end(g));
  for (int i = 0; i < CAP_STEPS; ++i) {
    TU_OK(ct_copy_(sx, xs[CAP_WARMUP + i], false));
    TU_OK(ct_copy_(sy, ys[CAP_WARMUP + i], false));
    TU_OK(ct_cuda_graph_replay(g));
    double l = NAN;
    TU_OK(ct_item(sloss, &l));
    if (memcmp(&l, &eager_loss[i], sizeof l) != 0)
      fail_msg("%s step %d: replayed loss %.9g, eager %.9g", ct_dtype_name(dt), i, l, eager_loss[i]);
  }
  int np = 0;
  ct_param **pe = ct_module_parameters(eager.g.root, &np), **pg = ct_module_parameters(graphed.g.root, &np);
  for (int i = 0; i < np; ++i) {
    double *a = tu_to_f64(pe[i]->value), *b = tu_to_f64(pg[i]->value);
    for (int64_t e = 0; e < ct_numel(pe[i]->value); ++e)
      if (memcmp(&a[e], &b[e], sizeof a[e]) != 0)
        fail_msg("%s: %s element %lld: eager %.9g, replay %.9g", ct_dtype_name(dt), pe[i]->name, (long long)e, a[e],
                 b[e]);
    free(a), free(b);
  }
  double se = 0, sg = 0;
  TU_OK(ct_grad_scaler_get_scale(eager.scaler, &se));
  TU_OK(ct_grad_scaler_get_scale(graphed.scaler, &sg));
  if (se != sg) fail_msg("%s: scale %g eager, %g replayed", ct_dtype_name(dt), se, sg);
  if (dt == CT_F16 && !(se > 1024.0)) fail_msg("float16: the scale never grew (%g): no clean steps?", se);
  ct_cuda_graph_free(g);
  ct_free(sloss), ct_free(sx), ct_free(sy);
  for (int i = 0; i < CAP_WARMUP + CAP_STEPS; ++i) ct_free(xs[i]), ct_free(ys[i]);
  trainer_free(&eager), trainer_free(&graphed);
  ct_stream_free(side);
}

static void test_capture_under_autocast(void **state) {
  (void)state;
  fixture f = {0};
  load_fixture(&f);
  capture_case(&f, CT_BF16);
  capture_case(&f, CT_F16); // with the GradScaler
  free_fixture(&f);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_vs_torch),    cmocka_unit_test(test_backward_region),
      cmocka_unit_test(test_dtype_table),      cmocka_unit_test(test_lowp_vs_f64),
      cmocka_unit_test(test_module_boundaries), cmocka_unit_test(test_scaler_clip_tied),
      cmocka_unit_test(test_capture_under_autocast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
