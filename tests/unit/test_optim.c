// SPDX-License-Identifier: MIT
//
// test_optim: SGD, Adam, AdamW, zero_grad and clip_grad_norm_ on the device
// under test.
//
// Invariant checked: after every step, each parameter and each state tensor
// (momentum_buffer, exp_avg, exp_avg_sq, max_exp_avg_sq) equals a float64
// reference written here from torch.optim's formulas (not from optim.c),
// starting from the same values, within a tolerance fitted to the dtype.
// Parameters are ct_param structs built here (no modules): three tensors,
// one large enough (70001 elements) to take the multi-threaded CPU loop and
// many CUDA blocks. Gradients change scale from step to step (x1, x3, x0.2,
// x1.5) so that amsgrad's running maximum matters.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"    // ct_named_tensors_free
#include "optim_kernels.h" // cti_optimizer_state_tensor (internal)
#include "testutil.h"
#include "tu_ref.h"

enum { SGD, ADAM, ADAMW };
#define NP 3
#define MAX_STEPS 6
static const ct_shape shapes[NP] = {CT_SHAPE(7, 5), CT_SHAPE(11), CT_SHAPE(70001)};
static const double grad_scale[MAX_STEPS] = {1.0, 3.0, 0.2, 1.5, 0.7, 2.0};

typedef struct cfg {
  int kind;
  ct_sgd_options sgd;
  ct_adam_options adam;
  const char *label;
} cfg;

// ---- the float64 reference: torch.optim's single-tensor formulas --------------------------------
typedef struct refp {
  int64_t n, step;
  double *p, *buf, *m, *v, *vmax; // buf: SGD momentum_buffer (valid once step >= 1)
} refp;

static void ref_init(refp *r, const double *p0, int64_t n) {
  r->n = n;
  r->step = 0;
  r->p = ref_alloc(n), r->buf = ref_alloc(n), r->m = ref_alloc(n), r->v = ref_alloc(n),
  r->vmax = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) r->p[i] = p0[i], r->m[i] = r->v[i] = r->vmax[i] = 0.0;
}

static void ref_free(refp *r) {
  free(r->p), free(r->buf), free(r->m), free(r->v), free(r->vmax);
}

// torch.optim.SGD: d_p = grad (+ wd * p); buf = d_p at first, then
// momentum * buf + (1 - dampening) * d_p; nesterov: d_p + momentum * buf;
// p -= lr * d_p. maximize negates the gradient first.
static void ref_sgd(const ct_sgd_options *o, double lr, refp *r, const double *g) {
  r->step++;
  for (int64_t i = 0; i < r->n; ++i) {
    double d = o->maximize ? -g[i] : g[i];
    if (o->weight_decay != 0) d += o->weight_decay * r->p[i];
    if (o->momentum != 0) {
      r->buf[i] = r->step == 1 ? d : o->momentum * r->buf[i] + (1 - o->dampening) * d;
      d = o->nesterov ? d + o->momentum * r->buf[i] : r->buf[i];
    }
    r->p[i] -= lr * d;
  }
}

// torch.optim.Adam / AdamW: m, v moving averages; bias corrections
// 1 - beta^step; p -= lr / bc1 * m / (sqrt(v_hat) / sqrt(bc2) + eps), with
// v_hat the running maximum of v under amsgrad. Adam adds wd * p to the
// gradient; AdamW multiplies p by 1 - lr * wd first.
static void ref_adam(const ct_adam_options *o, bool decoupled, double lr, refp *r, const double *g) {
  r->step++;
  double bc1 = 1 - pow(o->beta1, (double)r->step), bc2 = 1 - pow(o->beta2, (double)r->step);
  for (int64_t i = 0; i < r->n; ++i) {
    double gi = o->maximize ? -g[i] : g[i];
    if (decoupled) r->p[i] *= 1 - lr * o->weight_decay;
    else if (o->weight_decay != 0) gi += o->weight_decay * r->p[i];
    r->m[i] = o->beta1 * r->m[i] + (1 - o->beta1) * gi;
    r->v[i] = o->beta2 * r->v[i] + (1 - o->beta2) * gi * gi;
    double vh = r->v[i];
    if (o->amsgrad) {
      if (r->v[i] > r->vmax[i]) r->vmax[i] = r->v[i];
      vh = r->vmax[i];
    }
    r->p[i] -= lr / bc1 * r->m[i] / (sqrt(vh) / sqrt(bc2) + o->eps);
  }
}

// ---- helpers ------------------------------------------------------------------------------------
static void assert_tol(const ct_tensor *t, const double *ref, ct_dtype dt, double atol32,
                       const char *what) {
  if (dt == CT_F32) tu_assert_close(t, ref, 1e-5, atol32, what);
  else tu_assert_close(t, ref, 1e-12, 1e-14, what);
}

static void set_param(ct_param *p, const char *name, const double *x, ct_shape s, ct_dtype dt) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->value = tu_from_f64(x, s, dt, tu_device);
  TU_CHECK(p->value);
}

static void free_params(ct_param *ps, int n) {
  for (int i = 0; i < n; ++i) ct_free(ps[i].value), ct_free(ps[i].grad);
}

static ct_optimizer *make_opt(const cfg *c, ct_param **pp, int n) {
  switch (c->kind) {
  case SGD: return ct_optim_sgd(pp, n, c->sgd);
  case ADAM: return ct_optim_adam(pp, n, c->adam);
  default: return ct_optim_adamw(pp, n, c->adam);
  }
}

// Runs `steps` steps of configuration c on NP parameters of dtype dt and
// checks parameters and state after each. present[s * NP + j]: parameter j
// has a grad at step s (NULL: all do). lrs[s]: set_lr before step s (NULL:
// keep the configured lr).
static void run_case(const cfg *c, ct_dtype dt, int steps, const bool *present, const double *lrs) {
  ct_param ps[NP];
  ct_param *pp[NP];
  refp r[NP];
  for (int j = 0; j < NP; ++j) {
    int64_t n = ct_shape_numel(shapes[j]);
    double *x = ref_alloc(n);
    ref_random(x, n, dt, -1, 1);
    char name[16];
    snprintf(name, sizeof name, "p%d", j);
    set_param(&ps[j], name, x, shapes[j], dt);
    pp[j] = &ps[j];
    ref_init(&r[j], x, n);
    free(x);
  }
  ct_optimizer *opt = make_opt(c, pp, NP);
  TU_CHECK(opt);
  double lr = c->kind == SGD ? c->sgd.lr : c->adam.lr;
  assert_true(ct_optimizer_get_lr(opt) == lr);
  for (int s = 0; s < steps; ++s) {
    if (lrs) {
      lr = lrs[s];
      TU_OK(ct_optimizer_set_lr(opt, lr));
      assert_true(ct_optimizer_get_lr(opt) == lr);
    }
    double *g[NP] = {0};
    for (int j = 0; j < NP; ++j) {
      ct_free(ps[j].grad);
      ps[j].grad = NULL;
      if (present && !present[s * NP + j]) continue;
      int64_t n = r[j].n;
      g[j] = ref_alloc(n);
      ref_random(g[j], n, dt, -1, 1);
      for (int64_t i = 0; i < n; ++i) g[j][i] = ref_cast(g[j][i] * grad_scale[s], dt);
      ps[j].grad = tu_from_f64(g[j], shapes[j], dt, tu_device);
      TU_CHECK(ps[j].grad);
    }
    TU_OK(ct_optimizer_step(opt));
    for (int j = 0; j < NP; ++j) {
      if (g[j]) {
        if (c->kind == SGD) ref_sgd(&c->sgd, lr, &r[j], g[j]);
        else ref_adam(&c->adam, c->kind == ADAMW, lr, &r[j], g[j]);
      }
      char what[160];
      snprintf(what, sizeof what, "%s %s, step %d, param %d", c->label, ct_dtype_name(dt), s + 1, j);
      assert_tol(ps[j].value, r[j].p, dt, 1e-6, what);
      assert_int_equal(cti_optimizer_state_step(opt, j), r[j].step);
      if (c->kind == SGD) {
        ct_tensor *b = cti_optimizer_state_tensor(opt, j, "momentum_buffer");
        if (c->sgd.momentum == 0 || r[j].step == 0) {
          assert_null(b);
        } else {
          snprintf(what, sizeof what, "%s %s, step %d, momentum_buffer %d", c->label,
                   ct_dtype_name(dt), s + 1, j);
          assert_tol(b, r[j].buf, dt, 1e-6, what);
        }
        continue;
      }
      ct_tensor *m = cti_optimizer_state_tensor(opt, j, "exp_avg");
      ct_tensor *v = cti_optimizer_state_tensor(opt, j, "exp_avg_sq");
      ct_tensor *vm = cti_optimizer_state_tensor(opt, j, "max_exp_avg_sq");
      if (r[j].step == 0) {
        assert_null(m);
        assert_null(v);
        assert_null(vm);
        continue;
      }
      snprintf(what, sizeof what, "%s %s, step %d, exp_avg %d", c->label, ct_dtype_name(dt), s + 1, j);
      assert_tol(m, r[j].m, dt, 1e-6, what);
      snprintf(what, sizeof what, "%s %s, step %d, exp_avg_sq %d", c->label, ct_dtype_name(dt), s + 1, j);
      assert_tol(v, r[j].v, dt, 1e-8, what);
      if (c->adam.amsgrad) {
        snprintf(what, sizeof what, "%s %s, step %d, max_exp_avg_sq %d", c->label, ct_dtype_name(dt),
                 s + 1, j);
        assert_tol(vm, r[j].vmax, dt, 1e-8, what);
      } else {
        assert_null(vm);
      }
    }
    for (int j = 0; j < NP; ++j) free(g[j]);
  }
  ct_optimizer_free(opt);
  free_params(ps, NP);
  for (int j = 0; j < NP; ++j) ref_free(&r[j]);
}

static const ct_dtype dtypes[2] = {CT_F32, CT_F64};

// ---- tests --------------------------------------------------------------------------------------
static void test_sgd(void **state) {
  (void)state;
  cfg cs[] = {
      {.kind = SGD, .sgd = {.lr = 0.1}, .label = "SGD"},
      {.kind = SGD, .sgd = {.lr = 0.05, .weight_decay = 1e-2}, .label = "SGD wd"},
      {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.9}, .label = "SGD momentum"},
      {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2},
       .label = "SGD momentum dampening wd"},
      {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true},
       .label = "SGD nesterov wd"},
      {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.5, .maximize = true}, .label = "SGD momentum maximize"},
      {.kind = SGD, .sgd = {.lr = 0.2, .weight_decay = 0.1, .maximize = true}, .label = "SGD wd maximize"},
  };
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; ++k)
    for (int d = 0; d < 2; ++d) run_case(&cs[k], dtypes[d], 4, NULL, NULL);
}

static void test_adam(void **state) {
  (void)state;
  ct_adam_options def = ct_adam_defaults(), ams = def, wd = def, all = def, fast = def;
  ams.amsgrad = true;
  wd.weight_decay = 1e-2;
  all.amsgrad = all.maximize = true;
  all.weight_decay = 0.1;
  fast.lr = 1e-2, fast.beta1 = 0.8, fast.beta2 = 0.99, fast.eps = 1e-6;
  cfg cs[] = {
      {.kind = ADAM, .adam = def, .label = "Adam"},
      {.kind = ADAM, .adam = ams, .label = "Adam amsgrad"},
      {.kind = ADAM, .adam = wd, .label = "Adam wd"},
      {.kind = ADAM, .adam = all, .label = "Adam amsgrad maximize wd"},
      {.kind = ADAM, .adam = fast, .label = "Adam lr betas eps"},
  };
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; ++k)
    for (int d = 0; d < 2; ++d) run_case(&cs[k], dtypes[d], 5, NULL, NULL);
}

static void test_adamw(void **state) {
  (void)state;
  ct_adam_options def = ct_adamw_defaults(), ams = def, max = def, nowd = def, big = def;
  ams.amsgrad = true;
  max.maximize = true;
  nowd.weight_decay = 0;
  big.lr = 0.05, big.weight_decay = 0.5; // 1 - lr * wd far from 1
  cfg cs[] = {
      {.kind = ADAMW, .adam = def, .label = "AdamW"},
      {.kind = ADAMW, .adam = ams, .label = "AdamW amsgrad"},
      {.kind = ADAMW, .adam = max, .label = "AdamW maximize"},
      {.kind = ADAMW, .adam = nowd, .label = "AdamW wd 0"},
      {.kind = ADAMW, .adam = big, .label = "AdamW lr 0.05 wd 0.5"},
  };
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; ++k)
    for (int d = 0; d < 2; ++d) run_case(&cs[k], dtypes[d], 5, NULL, NULL);
}

// A parameter whose grad is NULL is left alone and its state does not
// advance: its momentum buffer starts at its own first step, and its Adam
// bias corrections count only its own steps.
static void test_null_grads_skipped(void **state) {
  (void)state;
  const bool present[5 * NP] = {
      1, 0, 0, //
      1, 1, 0, //
      0, 1, 1, //
      1, 0, 1, //
      1, 1, 1,
  };
  cfg cs[] = {
      {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, .label = "SGD skip"},
      {.kind = ADAM, .adam = ct_adam_defaults(), .label = "Adam skip"},
      {.kind = ADAMW, .adam = ct_adamw_defaults(), .label = "AdamW skip"},
  };
  cs[1].adam.amsgrad = true;
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; ++k)
    for (int d = 0; d < 2; ++d) run_case(&cs[k], dtypes[d], 5, present, NULL);
}

// set_lr between steps (a schedule) takes effect at the next step; a
// negative lr is refused and leaves the old one.
static void test_set_lr(void **state) {
  (void)state;
  const double lrs[4] = {0.1, 0.05, 0.05, 0.01};
  cfg sgd = {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.9}, .label = "SGD set_lr"};
  cfg adam = {.kind = ADAM, .adam = ct_adam_defaults(), .label = "Adam set_lr"};
  cfg adamw = {.kind = ADAMW, .adam = ct_adamw_defaults(), .label = "AdamW set_lr"};
  run_case(&sgd, CT_F32, 4, NULL, lrs);
  run_case(&adam, CT_F32, 4, NULL, lrs);
  run_case(&adamw, CT_F64, 4, NULL, lrs);

  double x[3] = {1, 2, 3};
  ct_param p;
  set_param(&p, "w", x, CT_SHAPE(3), CT_F32);
  ct_param *pp = &p;
  ct_optimizer *opt = ct_optim_sgd(&pp, 1, ct_sgd_defaults(0.5));
  TU_CHECK(opt);
  assert_int_equal(ct_optimizer_set_lr(opt, -0.1), CT_ERR_VALUE);
  ref_assert_error(CT_ERR_VALUE, "set_lr(-0.1)", "Invalid learning rate: -0.1", NULL);
  assert_true(ct_optimizer_get_lr(opt) == 0.5);
  ct_optimizer_free(opt);
  free_params(&p, 1);
}

// zero_grad(false) zeroes every grad in place (the same tensors);
// zero_grad(true) frees them, and a step then changes nothing.
static void test_zero_grad(void **state) {
  (void)state;
  ct_param ps[2];
  ct_param *pp[2] = {&ps[0], &ps[1]};
  double x[6] = {1, -2, 3, 0.5, 0.25, -4}, g[6] = {0.1, 0.2, -0.3, 1, 2, 3}, zeros[6] = {0};
  set_param(&ps[0], "a", x, CT_SHAPE(2, 2), CT_F32);
  set_param(&ps[1], "b", x + 4, CT_SHAPE(2), CT_F32);
  ps[0].grad = tu_from_f64(g, CT_SHAPE(2, 2), CT_F32, tu_device);
  TU_CHECK(ps[0].grad); // ps[1] has no grad: zero_grad leaves it NULL
  ct_optimizer *opt = ct_optim_adam(pp, 2, ct_adam_defaults());
  TU_CHECK(opt);
  ct_tensor *before = ps[0].grad;
  TU_OK(ct_optimizer_zero_grad(opt, false));
  assert_ptr_equal(ps[0].grad, before);
  assert_null(ps[1].grad);
  tu_assert_close(ps[0].grad, zeros, 0, 0, "zero_grad(set_to_none=False)");

  TU_OK(ct_optimizer_zero_grad(opt, true));
  assert_null(ps[0].grad);
  assert_null(ps[1].grad);
  TU_OK(ct_optimizer_step(opt)); // nothing has a grad: nothing moves
  double xr[6];
  for (int i = 0; i < 6; ++i) xr[i] = (double)(float)x[i];
  tu_assert_close(ps[0].value, xr, 0, 0, "step after set_to_none (a)");
  tu_assert_close(ps[1].value, xr + 4, 0, 0, "step after set_to_none (b)");
  assert_int_equal(cti_optimizer_state_step(opt, 0), 0);
  assert_null(cti_optimizer_state_tensor(opt, 0, "exp_avg"));
  ct_optimizer_free(opt);
  free_params(ps, 2);
}

// clip_grad_norm_: the total norm is the L2 norm of all grads together
// (NULL grads skipped); above max_norm every grad is scaled by
// max_norm / (total + 1e-6); below it nothing changes (bit for bit).
static void check_clip(ct_dtype dt, double max_norm_factor) {
  const ct_shape gs[4] = {CT_SHAPE(3, 4), CT_SHAPE(5), CT_SHAPE(70001), CT_SHAPE(2)};
  ct_param ps[4];
  ct_param *pp[4];
  double *g[4];
  double sumsq = 0;
  for (int j = 0; j < 4; ++j) {
    int64_t n = ct_shape_numel(gs[j]);
    double *x = ref_alloc(n);
    ref_random(x, n, dt, -1, 1);
    set_param(&ps[j], "p", x, gs[j], dt);
    pp[j] = &ps[j];
    free(x);
    g[j] = NULL;
    if (j == 1) continue; // no grad: skipped
    g[j] = ref_alloc(n);
    ref_random(g[j], n, dt, -2, 2);
    ps[j].grad = tu_from_f64(g[j], gs[j], dt, tu_device);
    TU_CHECK(ps[j].grad);
    for (int64_t i = 0; i < n; ++i) sumsq += g[j][i] * g[j][i];
  }
  double total_ref = sqrt(sumsq), max_norm = total_ref * max_norm_factor;
  double coef = max_norm / (total_ref + 1e-6);
  if (coef > 1) coef = 1;
  double total = -1;
  TU_OK(ct_clip_grad_norm_(pp, 4, max_norm, &total));
  char what[96];
  snprintf(what, sizeof what, "clip_grad_norm_ %s, max_norm = %g * norm", ct_dtype_name(dt), max_norm_factor);
  if (fabs(total - total_ref) > 1e-10 * total_ref) // accumulated in double on every device
    fail_msg("%s: total norm %.17g, expected %.17g", what, total, total_ref);
  assert_null(ps[1].grad);
  for (int j = 0; j < 4; ++j) {
    if (!g[j]) continue;
    int64_t n = ct_shape_numel(gs[j]);
    for (int64_t i = 0; i < n; ++i) g[j][i] *= coef;
    if (coef == 1) tu_assert_close(ps[j].grad, g[j], 0, 0, what);
    else tu_assert_close(ps[j].grad, g[j], 3 * ref_eps(dt) + 1e-11, 0, what);
    free(g[j]);
  }
  free_params(ps, 4);
}

static void test_clip_grad_norm(void **state) {
  (void)state;
  for (int d = 0; d < 2; ++d) {
    check_clip(dtypes[d], 0.25); // clipped
    check_clip(dtypes[d], 2.0);  // left alone
  }
  // No grads at all: total 0, nothing to do. total_norm may be NULL.
  double x[2] = {1, 2}, g[2] = {3, 4}, total = -1;
  ct_param p;
  set_param(&p, "w", x, CT_SHAPE(2), CT_F32);
  ct_param *pp = &p;
  TU_OK(ct_clip_grad_norm_(&pp, 1, 1.0, &total));
  assert_true(total == 0.0);
  p.grad = tu_from_f64(g, CT_SHAPE(2), CT_F32, tu_device);
  TU_CHECK(p.grad);
  TU_OK(ct_clip_grad_norm_(&pp, 1, 1.0, NULL)); // ||(3, 4)|| = 5 -> (0.6, 0.8)
  const double want[2] = {3 / (5 + 1e-6), 4 / (5 + 1e-6)};
  tu_assert_close(p.grad, want, 2e-7, 0, "clip (3, 4) to norm 1");
  TU_OK(ct_clip_grad_norm_(&pp, 1, 1.0, &total));
  assert_true(fabs(total - 1.0) < 1e-6);
  assert_int_equal(ct_clip_grad_norm_(&pp, 1, -1.0, &total), CT_ERR_VALUE);
  ref_assert_error(CT_ERR_VALUE, "clip max_norm -1", "max_norm", "-1.0", NULL);
  TU_OK(ct_clip_grad_norm_(NULL, 0, 1.0, &total));
  assert_true(total == 0.0);
  free_params(&p, 1);
}

// Invalid options fail with CT_ERR_VALUE and torch's words (Python's repr of
// the value), before any parameter is looked at.
static void test_invalid_options(void **state) {
  (void)state;
  double x[2] = {1, 2};
  ct_param p;
  set_param(&p, "w", x, CT_SHAPE(2), CT_F32);
  ct_param *pp = &p;
  struct {
    ct_sgd_options o;
    const char *msg;
  } sgd[] = {
      {{.lr = -0.1}, "Invalid learning rate: -0.1"},
      {{.lr = -1e-5}, "Invalid learning rate: -1e-05"},
      {{.lr = -123456.5}, "Invalid learning rate: -123456.5"},
      {{.lr = -1e16}, "Invalid learning rate: -1e+16"},
      {{.lr = -3}, "Invalid learning rate: -3.0"},
      {{.lr = 0.1, .momentum = -0.5}, "Invalid momentum value: -0.5"},
      {{.lr = 0.1, .weight_decay = -1}, "Invalid weight_decay value: -1.0"},
      {{.lr = 0.1, .nesterov = true}, "Nesterov momentum requires a momentum and zero dampening"},
      {{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true},
       "Nesterov momentum requires a momentum and zero dampening"},
  };
  for (size_t k = 0; k < sizeof sgd / sizeof sgd[0]; ++k) {
    assert_null(ct_optim_sgd(&pp, 1, sgd[k].o));
    ref_assert_error(CT_ERR_VALUE, sgd[k].msg, sgd[k].msg, "ct_optim_sgd", NULL);
  }
  ct_adam_options base = ct_adam_defaults();
  struct {
    double lr, b1, b2, eps, wd;
    const char *msg;
  } adam[] = {
      {-0.1, 0.9, 0.999, 1e-8, 0, "Invalid learning rate: -0.1"},
      {NAN, 0.9, 0.999, 1e-8, 0, "Invalid learning rate: nan"},
      {1e-3, 0.9, 0.999, -1e-8, 0, "Invalid epsilon value: -1e-08"},
      {1e-3, 1.0, 0.999, 1e-8, 0, "Invalid beta parameter at index 0: 1.0"},
      {1e-3, -0.1, 0.999, 1e-8, 0, "Invalid beta parameter at index 0: -0.1"},
      {1e-3, 0.9, 1.5, 1e-8, 0, "Invalid beta parameter at index 1: 1.5"},
      {1e-3, 0.9, 0.999, 1e-8, -0.01, "Invalid weight_decay value: -0.01"},
  };
  for (size_t k = 0; k < sizeof adam / sizeof adam[0]; ++k) {
    ct_adam_options o = base;
    o.lr = adam[k].lr, o.beta1 = adam[k].b1, o.beta2 = adam[k].b2, o.eps = adam[k].eps,
    o.weight_decay = adam[k].wd;
    assert_null(ct_optim_adam(&pp, 1, o));
    ref_assert_error(CT_ERR_VALUE, adam[k].msg, adam[k].msg, "ct_optim_adam", NULL);
    assert_null(ct_optim_adamw(&pp, 1, o));
    ref_assert_error(CT_ERR_VALUE, adam[k].msg, adam[k].msg, "ct_optim_adamw", NULL);
  }
  assert_null(ct_optim_sgd(&pp, 0, ct_sgd_defaults(0.1)));
  ref_assert_error(CT_ERR_VALUE, "empty list", "optimizer got an empty parameter list", NULL);
  assert_null(ct_optim_adam(NULL, 2, ct_adam_defaults()));
  ref_assert_error(CT_ERR_VALUE, "NULL params", "ct_optim_adam", NULL);
  // Edge values that torch accepts: lr 0, beta 0, eps 0.
  ct_adam_options edge = {.lr = 0, .beta1 = 0, .beta2 = 0, .eps = 0};
  ct_optimizer *opt = ct_optim_adam(&pp, 1, edge);
  TU_CHECK(opt);
  ct_optimizer_free(opt);
  free_params(&p, 1);
}

// A step with one bad parameter fails before touching any parameter.
static void test_step_errors(void **state) {
  (void)state;
  double x[6] = {1, 2, 3, 4, 5, 6};
  ct_param ps[2];
  ct_param *pp[2] = {&ps[0], &ps[1]};
  set_param(&ps[0], "good", x, CT_SHAPE(6), CT_F32);
  set_param(&ps[1], "bad", x, CT_SHAPE(2, 3), CT_F32);
  ps[0].grad = tu_from_f64(x, CT_SHAPE(6), CT_F32, tu_device);
  ps[1].grad = tu_from_f64(x, CT_SHAPE(3, 2), CT_F32, tu_device);
  TU_CHECK(ps[0].grad);
  TU_CHECK(ps[1].grad);
  ct_optimizer *opt = ct_optim_sgd(pp, 2, ct_sgd_defaults(0.1));
  TU_CHECK(opt);
  assert_int_equal(ct_optimizer_step(opt), CT_ERR_SHAPE);
  ref_assert_error(CT_ERR_SHAPE, "grad shape", "'bad'", "(2, 3)", "(3, 2)", NULL);
  tu_assert_close(ps[0].value, x, 0, 0, "the good parameter after a failed step");
  assert_int_equal(cti_optimizer_state_step(opt, 0), 0);

  ct_free(ps[1].grad);
  ps[1].grad = tu_from_f64(x, CT_SHAPE(2, 3), CT_F64, tu_device);
  TU_CHECK(ps[1].grad);
  assert_int_equal(ct_optimizer_step(opt), CT_ERR_DTYPE);
  ref_assert_error(CT_ERR_DTYPE, "grad dtype", "'bad'", "float32", "float64", NULL);
  ct_optimizer_free(opt);
  free_params(ps, 2);

  // float16 parameters: not an optimizer dtype here (keep float32 master weights).
  ct_param h;
  set_param(&h, "h", x, CT_SHAPE(6), CT_F16);
  h.grad = tu_from_f64(x, CT_SHAPE(6), CT_F16, tu_device);
  ct_param *hp = &h;
  opt = ct_optim_adam(&hp, 1, ct_adam_defaults());
  TU_CHECK(opt);
  assert_int_equal(ct_optimizer_step(opt), CT_ERR_DTYPE);
  ref_assert_error(CT_ERR_DTYPE, "float16 param", "float16", NULL);
  assert_int_equal(ct_clip_grad_norm_(&hp, 1, 1.0, NULL), CT_ERR_DTYPE);
  ct_optimizer_free(opt);
  free_params(&h, 1);
  assert_int_equal(ct_optimizer_step(NULL), CT_ERR_VALUE);
}

// A gradient that is a non-contiguous view (a transpose) is read in its
// logical order by step and scaled in place by clip_grad_norm_.
static void test_noncontiguous_grads(void **state) {
  (void)state;
  double x[12], gt[12], want[12];
  for (int i = 0; i < 12; ++i) x[i] = i * 0.25, gt[i] = (i % 5) - 2.0;
  ct_param p;
  set_param(&p, "w", x, CT_SHAPE(3, 4), CT_F32);
  ct_tensor *base = tu_from_f64(gt, CT_SHAPE(4, 3), CT_F32, tu_device); // g = base^T, (3, 4)
  TU_CHECK(base);
  p.grad = ct_t(base);
  TU_CHECK(p.grad);
  assert_false(ct_is_contiguous(p.grad));
  ct_param *pp = &p;
  ct_optimizer *opt = ct_optim_sgd(&pp, 1, ct_sgd_defaults(0.5));
  TU_CHECK(opt);
  TU_OK(ct_optimizer_step(opt));
  double sumsq = 0;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) {
      double g = gt[c * 3 + r];
      want[r * 4 + c] = x[r * 4 + c] - 0.5 * g;
      sumsq += g * g;
    }
  tu_assert_close(p.value, want, 1e-6, 1e-6, "SGD step with a transposed grad");
  double total = 0, coef = 1.0 / (sqrt(sumsq) + 1e-6);
  TU_OK(ct_clip_grad_norm_(&pp, 1, 1.0, &total));
  assert_true(fabs(total - sqrt(sumsq)) < 1e-9);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) want[r * 4 + c] = gt[c * 3 + r] * coef;
  tu_assert_close(p.grad, want, 3e-7, 0, "clip_grad_norm_ of a transposed grad");
  double back[12];
  for (int i = 0; i < 12; ++i) back[i] = gt[i] * coef;
  tu_assert_close(base, back, 3e-7, 0, "the transposed grad's storage");
  ct_optimizer_free(opt);
  ct_free(base);
  free_params(&p, 1);
}

static void test_names_and_defaults(void **state) {
  (void)state;
  ct_sgd_options s = ct_sgd_defaults(0.25);
  assert_true(s.lr == 0.25 && s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 &&
              !s.nesterov && !s.maximize);
  ct_adam_options a = ct_adam_defaults(), w = ct_adamw_defaults();
  assert_true(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 &&
              a.weight_decay == 0 && !a.amsgrad && !a.maximize);
  assert_true(w.lr == 1e-3 && w.beta1 == 0.9 && w.beta2 == 0.999 && w.eps == 1e-8 &&
              w.weight_decay == 1e-2 && !w.amsgrad && !w.maximize);
  double x[1] = {1};
  ct_param p;
  set_param(&p, "w", x, CT_SHAPE(1), CT_F32);
  ct_param *pp = &p;
  ct_optimizer *o1 = ct_optim_sgd(&pp, 1, s), *o2 = ct_optim_adam(&pp, 1, a),
               *o3 = ct_optim_adamw(&pp, 1, w);
  TU_CHECK(o1);
  TU_CHECK(o2);
  TU_CHECK(o3);
  assert_string_equal(ct_optimizer_name(o1), "SGD");
  assert_string_equal(ct_optimizer_name(o2), "Adam");
  assert_string_equal(ct_optimizer_name(o3), "AdamW");
  assert_true(ct_optimizer_get_lr(o1) == 0.25 && ct_optimizer_get_lr(o3) == 1e-3);
  ct_optimizer_free(o1), ct_optimizer_free(o2), ct_optimizer_free(o3);
  ct_optimizer_free(NULL);
  free_params(&p, 1);
}

// ---- state_dict -------------------------------------------------------------------------------
// Gradient j of step k: a fixed pattern, the same for both optimizers compared.
static void set_grads(ct_param *ps, int k, const bool *present) {
  for (int j = 0; j < NP; ++j) {
    ct_free(ps[j].grad);
    ps[j].grad = NULL;
    if (present && !present[j]) continue;
    const int64_t n = ct_shape_numel(shapes[j]);
    double *g = malloc((size_t)n * sizeof *g);
    for (int64_t i = 0; i < n; ++i) g[i] = sin(0.37 * (double)i + k + 1.7 * j) * grad_scale[k % MAX_STEPS];
    ps[j].grad = tu_from_f64(g, shapes[j], ct_dtype_of(ps[j].value), tu_device);
    TU_CHECK(ps[j].grad);
    free(g);
  }
}

static const ct_tensor *entry(const ct_named_tensor *e, int n, const char *name) {
  for (int i = 0; i < n; ++i)
    if (!strcmp(e[i].name, name)) return e[i].tensor;
  return NULL;
}

// Optimizer A steps 3 times (parameter 1 without a grad at the first step,
// so its count differs), its state_dict loads into B over copies of A's
// parameters, and both step twice more: the parameters stay bit-identical.
// Without the load B's bias corrections and momenta start over, and they
// differ (checked too, so the comparison can fail).
static void check_round_trip(const cfg *c, ct_dtype dt) {
  ct_param pa[NP], pb[NP], pc[NP];
  ct_param *qa[NP], *qb[NP], *qc[NP];
  for (int j = 0; j < NP; ++j) {
    const int64_t n = ct_shape_numel(shapes[j]);
    double *x = malloc((size_t)n * sizeof *x);
    tu_fill_uniform(x, n, -1, 1);
    set_param(&pa[j], "p", x, shapes[j], dt);
    free(x);
    qa[j] = &pa[j], qb[j] = &pb[j], qc[j] = &pc[j];
  }
  ct_optimizer *a = make_opt(c, qa, NP);
  TU_CHECK(a);
  const bool skip1[NP] = {1, 0, 1};
  for (int k = 0; k < 3; ++k) {
    set_grads(pa, k, k == 0 ? skip1 : NULL);
    TU_OK(ct_optimizer_step(a));
  }
  int n = 0;
  ct_named_tensor *sd = ct_optimizer_state_dict(a, "optimizer.", &n);
  TU_CHECK(sd);
  const ct_tensor *st1 = entry(sd, n, "optimizer.state.1.step"), *st0 = entry(sd, n, "optimizer.state.0.step");
  double v0 = 0, v1 = 0;
  if (!st0 || !st1 || ct_item(st0, &v0) || ct_item(st1, &v1) || v0 != 3 || v1 != 2)
    fail_msg("%s: step entries %g and %g, expected 3 and 2", c->label, v0, v1);
  if (c->kind != SGD && !entry(sd, n, "optimizer.state.2.exp_avg_sq")) fail_msg("%s: no exp_avg_sq", c->label);
  for (int j = 0; j < NP; ++j) {
    memset(&pb[j], 0, sizeof pb[j]), memset(&pc[j], 0, sizeof pc[j]);
    pb[j].value = ct_clone(pa[j].value), pc[j].value = ct_clone(pa[j].value);
    TU_CHECK(pb[j].value && pc[j].value);
  }
  ct_optimizer *b = make_opt(c, qb, NP), *fresh = make_opt(c, qc, NP);
  TU_CHECK(b && fresh);
  TU_OK(ct_optimizer_load_state_dict(b, sd, n, "optimizer."));
  for (int k = 3; k < 5; ++k) {
    set_grads(pa, k, NULL), set_grads(pb, k, NULL), set_grads(pc, k, NULL);
    TU_OK(ct_optimizer_step(a));
    TU_OK(ct_optimizer_step(b));
    TU_OK(ct_optimizer_step(fresh));
  }
  bool fresh_differs = false;
  for (int j = 0; j < NP; ++j) {
    double *x = tu_to_f64(pa[j].value), *y = tu_to_f64(pb[j].value), *z = tu_to_f64(pc[j].value);
    const int64_t m = ct_shape_numel(shapes[j]);
    for (int64_t i = 0; i < m; ++i) {
      if (x[i] != y[i])
        fail_msg("%s %s: parameter %d element %lld: %.17g continuing, %.17g after load_state_dict", c->label,
                 ct_dtype_name(dt), j, (long long)i, x[i], y[i]);
      fresh_differs |= x[i] != z[i];
    }
    free(x), free(y), free(z);
  }
  if (!fresh_differs) fail_msg("%s: a fresh optimizer gives the same parameters: the check cannot fail", c->label);
  ct_named_tensors_free(sd, n);
  ct_optimizer_free(a), ct_optimizer_free(b), ct_optimizer_free(fresh);
  free_params(pa, NP), free_params(pb, NP), free_params(pc, NP);
}

static void test_state_dict_round_trip(void **state) {
  (void)state;
  cfg cs[] = {
      {.kind = SGD, .sgd = {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, .label = "SGD"},
      {.kind = ADAM, .adam = ct_adam_defaults(), .label = "Adam amsgrad"},
      {.kind = ADAMW, .adam = ct_adamw_defaults(), .label = "AdamW"},
  };
  cs[1].adam.amsgrad = true;
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; ++k)
    for (int d = 0; d < 2; ++d) check_round_trip(&cs[k], dtypes[d]);
}

// A state_dict that does not fit is refused, naming what, and changes nothing.
static void test_state_dict_errors(void **state) {
  (void)state;
  ct_param ps[NP];
  ct_param *q[NP];
  for (int j = 0; j < NP; ++j) {
    double *x = calloc((size_t)ct_shape_numel(shapes[j]), sizeof *x);
    set_param(&ps[j], "p", x, shapes[j], CT_F32);
    free(x);
    q[j] = &ps[j];
  }
  ct_optimizer *a = ct_optim_adam(q, NP, ct_adam_defaults());
  TU_CHECK(a);
  set_grads(ps, 0, NULL);
  TU_OK(ct_optimizer_step(a));
  int n = 0;
  ct_named_tensor *sd = ct_optimizer_state_dict(a, "", &n);
  TU_CHECK(sd);
  ct_optimizer *b = ct_optim_adam(q, NP, ct_adam_defaults());
  TU_CHECK(b);
  // an index past the parameters
  snprintf(sd[0].name, sizeof sd[0].name, "state.9.exp_avg");
  if (ct_optimizer_load_state_dict(b, sd, n, "") == CT_OK) fail_msg("state.9 accepted");
  tu_assert_error_contains("\"state.9.exp_avg\" belong to no parameter", "index past the end");
  // a missing buffer of a stepped parameter
  snprintf(sd[0].name, sizeof sd[0].name, "other.0.exp_avg");
  if (ct_optimizer_load_state_dict(b, sd, n, "") == CT_OK) fail_msg("missing exp_avg accepted");
  tu_assert_error_contains("has a step count but no exp_avg", "missing buffer");
  // a shape that is not the parameter's: exp_avg of parameter 1 given parameter 0's tensor
  snprintf(sd[0].name, sizeof sd[0].name, "state.0.exp_avg");
  ct_tensor *keep = sd[1].tensor; // state.0.exp_avg_sq
  sd[1].tensor = entry(sd, n, "state.1.exp_avg") ? (ct_tensor *)entry(sd, n, "state.1.exp_avg") : keep;
  if (ct_optimizer_load_state_dict(b, sd, n, "") == CT_OK) fail_msg("a wrong shape accepted");
  tu_assert_error_contains("exp_avg_sq of parameter", "wrong shape");
  sd[1].tensor = keep;
  // nothing changed: b has no state yet
  int nb = -1;
  ct_named_tensor *sb = ct_optimizer_state_dict(b, "", &nb);
  TU_CHECK(sb);
  if (nb != 0) fail_msg("a failed load left %d state entries", nb);
  ct_named_tensors_free(sb, nb);
  // SGD's state in an Adam: a key Adam does not keep
  snprintf(sd[0].name, sizeof sd[0].name, "state.0.momentum_buffer");
  if (ct_optimizer_load_state_dict(b, sd, n, "") == CT_OK) fail_msg("momentum_buffer accepted by Adam");
  tu_assert_error_contains("another optimizer", "another optimizer's key");
  ct_named_tensors_free(sd, n);
  ct_optimizer_free(a), ct_optimizer_free(b);
  free_params(ps, NP);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_adam),
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_null_grads_skipped),
      cmocka_unit_test(test_set_lr),
      cmocka_unit_test(test_zero_grad),
      cmocka_unit_test(test_clip_grad_norm),
      cmocka_unit_test(test_invalid_options),
      cmocka_unit_test(test_step_errors),
      cmocka_unit_test(test_noncontiguous_grads),
      cmocka_unit_test(test_names_and_defaults),
      cmocka_unit_test(test_state_dict_round_trip),
      cmocka_unit_test(test_state_dict_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
