// SPDX-License-Identifier: MIT
//
// test_optim_torch: PyTorch's own optimizer steps, replayed on the device
// under test.
//
// tests/fixtures/optim/*.safetensors (written by tools/fixtures/optim.py
// with torch.optim, foreach=False) hold fixed float32 parameters, the
// gradients of 5 steps (some absent: p.grad is None, the step skips the
// parameter) and, after every step, each parameter and its optimizer state.
// This test rebuilds the parameters from the file, feeds the same gradients
// to ct_optimizer_step with the options stored in the file, and checks after
// every step that parameters, momentum buffers, exp_avg, exp_avg_sq,
// max_exp_avg_sq and the step counts match PyTorch within 1e-5 relative
// error (the two compute in float32 with the same formulas; they differ only
// where PyTorch's vectorized CPU loops fuse a multiply-add). clip.safetensors
// does the same for clip_grad_norm_.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_kernels.h" // cti_optimizer_state_tensor (internal)
#include "testutil.h"
#include "tu_ref.h"

#define NPARAM 3
#define STEPS 5
#define RTOL 1e-5

typedef struct fixture {
  ct_named_tensor *e;
  int n;
} fixture;

static void load(const char *file, fixture *f) {
  const char *dir = getenv("CT_FIXTURE_DIR");
  if (!dir || !*dir) fail_msg("CT_FIXTURE_DIR is not set (ctest sets it to tests/fixtures)");
  char path[1024];
  snprintf(path, sizeof path, "%s/optim/%s", dir, file);
  if (ct_load_safetensors(path, tu_device, &f->e, &f->n) != CT_OK)
    fail_msg("loading %s: %s", path, ct_last_error());
}

static ct_tensor *find(const fixture *f, const char *name) {
  for (int i = 0; i < f->n; ++i)
    if (!strcmp(f->e[i].name, name)) return f->e[i].tensor;
  return NULL;
}

static ct_tensor *need(const fixture *f, const char *name) {
  ct_tensor *t = find(f, name);
  if (!t) fail_msg("fixture has no tensor \"%s\"", name);
  return t;
}

// got vs PyTorch's tensor `want`: same shape, within RTOL (plus atol for
// values that cancel to almost nothing).
static void check_close(const ct_tensor *got, const ct_tensor *want, double atol, const char *what) {
  if (!got) fail_msg("%s: missing (NULL) where PyTorch has a tensor", what);
  if (!ct_shape_eq(ct_shape_of(got), ct_shape_of(want))) fail_msg("%s: shapes differ", what);
  double *ref = tu_to_f64(want);
  if (!ref) fail_msg("%s: cannot read the fixture: %s", what, ct_last_error());
  tu_assert_close(got, ref, RTOL, atol, what);
  free(ref);
}

static void replay(const char *file) {
  fixture f;
  load(file, &f);
  double *o = tu_to_f64(need(&f, "options"));
  TU_CHECK(o);
  ct_param ps[NPARAM];
  ct_param *pp[NPARAM];
  for (int j = 0; j < NPARAM; ++j) {
    char name[64];
    snprintf(name, sizeof name, "init.p%d", j);
    memset(&ps[j], 0, sizeof ps[j]);
    snprintf(ps[j].name, sizeof ps[j].name, "p%d", j);
    ps[j].value = ct_clone(need(&f, name));
    TU_CHECK(ps[j].value);
    pp[j] = &ps[j];
  }
  bool sgd = !strncmp(file, "sgd_", 4), adamw = !strncmp(file, "adamw_", 6);
  ct_optimizer *opt;
  if (sgd) {
    ct_sgd_options s = {.lr = o[0], .momentum = o[1], .dampening = o[2], .weight_decay = o[3],
                        .nesterov = o[4] != 0, .maximize = o[5] != 0};
    opt = ct_optim_sgd(pp, NPARAM, s);
  } else {
    ct_adam_options a = {.lr = o[0], .beta1 = o[1], .beta2 = o[2], .eps = o[3], .weight_decay = o[4],
                         .amsgrad = o[5] != 0, .maximize = o[6] != 0};
    opt = adamw ? ct_optim_adamw(pp, NPARAM, a) : ct_optim_adam(pp, NPARAM, a);
  }
  TU_CHECK(opt);
  static const char *keys[] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  static const double key_atol[] = {1e-7, 1e-7, 1e-10, 1e-10};
  for (int k = 1; k <= STEPS; ++k) {
    for (int j = 0; j < NPARAM; ++j) {
      char name[64];
      snprintf(name, sizeof name, "step%d.grad.p%d", k, j);
      ct_free(ps[j].grad);
      ct_tensor *g = find(&f, name);
      ps[j].grad = g ? ct_retain(g) : NULL;
    }
    TU_OK(ct_optimizer_step(opt));
    for (int j = 0; j < NPARAM; ++j) {
      char name[96], what[160];
      snprintf(name, sizeof name, "step%d.param.p%d", k, j);
      snprintf(what, sizeof what, "%s: %s", file, name);
      check_close(ps[j].value, need(&f, name), 1e-7, what);
      for (int q = 0; q < 4; ++q) {
        snprintf(name, sizeof name, "step%d.state.p%d.%s", k, j, keys[q]);
        snprintf(what, sizeof what, "%s: %s", file, name);
        ct_tensor *want = find(&f, name), *got = cti_optimizer_state_tensor(opt, j, keys[q]);
        if (!want && got) fail_msg("%s: PyTorch has no such state but the optimizer does", what);
        if (want) check_close(got, want, key_atol[q], what);
      }
      snprintf(name, sizeof name, "step%d.state.p%d.step", k, j);
      ct_tensor *st = find(&f, name);
      double steps = 0; // no entry: the parameter has not taken a step yet
      if (st) TU_OK(ct_item(st, &steps));
      if (!sgd && (double)cti_optimizer_state_step(opt, j) != steps)
        fail_msg("%s: p%d has taken %lld steps, PyTorch says %g", file, j,
                 (long long)cti_optimizer_state_step(opt, j), steps);
    }
  }
  ct_optimizer_free(opt);
  for (int j = 0; j < NPARAM; ++j) ct_free(ps[j].value), ct_free(ps[j].grad);
  free(o);
  ct_named_tensors_free(f.e, f.n);
}

static void test_sgd_plain(void **s) { (void)s; replay("sgd_plain.safetensors"); }
static void test_sgd_momentum(void **s) { (void)s; replay("sgd_momentum.safetensors"); }
static void test_sgd_nesterov(void **s) { (void)s; replay("sgd_nesterov.safetensors"); }
static void test_sgd_maximize(void **s) { (void)s; replay("sgd_maximize.safetensors"); }
static void test_adam_default(void **s) { (void)s; replay("adam_default.safetensors"); }
static void test_adam_amsgrad(void **s) { (void)s; replay("adam_amsgrad.safetensors"); }
static void test_adam_maximize(void **s) { (void)s; replay("adam_maximize.safetensors"); }
static void test_adamw_default(void **s) { (void)s; replay("adamw_default.safetensors"); }
static void test_adamw_amsgrad(void **s) { (void)s; replay("adamw_amsgrad.safetensors"); }

// torch.nn.utils.clip_grad_norm_ on the same grads: the returned total norm
// and the grads afterwards, once clipped and once left alone.
static void test_clip_grad_norm(void **state) {
  (void)state;
  fixture f;
  load("clip.safetensors", &f);
  double *max_norm = tu_to_f64(need(&f, "max_norm"));
  TU_CHECK(max_norm);
  int64_t ncase = ct_numel(need(&f, "max_norm"));
  for (int64_t c = 0; c < ncase; ++c) {
    ct_param ps[NPARAM];
    ct_param *pp[NPARAM];
    for (int j = 0; j < NPARAM; ++j) {
      char name[64];
      snprintf(name, sizeof name, "grad.g%d", j);
      memset(&ps[j], 0, sizeof ps[j]);
      ct_tensor *g = find(&f, name);
      ps[j].value = g ? ct_zeros_like(g, CT_F32, tu_device) : ct_zeros(CT_SHAPE(3), CT_F32, tu_device);
      TU_CHECK(ps[j].value);
      ps[j].grad = g ? ct_clone(g) : NULL;
      pp[j] = &ps[j];
    }
    double total = -1, want = 0;
    TU_OK(ct_clip_grad_norm_(pp, NPARAM, max_norm[c], &total));
    char name[64], what[128];
    snprintf(name, sizeof name, "case%lld.total_norm", (long long)c);
    TU_OK(ct_item(need(&f, name), &want));
    if (fabs(total - want) > RTOL * fabs(want))
      fail_msg("clip case %lld: total norm %.9g, PyTorch %.9g", (long long)c, total, want);
    for (int j = 0; j < NPARAM; ++j) {
      snprintf(name, sizeof name, "case%lld.grad.g%d", (long long)c, j);
      ct_tensor *w = find(&f, name);
      if (!w) {
        assert_null(ps[j].grad);
        continue;
      }
      snprintf(what, sizeof what, "clip.safetensors: %s", name);
      check_close(ps[j].grad, w, 0, what);
    }
    for (int j = 0; j < NPARAM; ++j) ct_free(ps[j].value), ct_free(ps[j].grad);
  }
  free(max_norm);
  ct_named_tensors_free(f.e, f.n);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd_plain),     cmocka_unit_test(test_sgd_momentum),
      cmocka_unit_test(test_sgd_nesterov),  cmocka_unit_test(test_sgd_maximize),
      cmocka_unit_test(test_adam_default),  cmocka_unit_test(test_adam_amsgrad),
      cmocka_unit_test(test_adam_maximize), cmocka_unit_test(test_adamw_default),
      cmocka_unit_test(test_adamw_amsgrad), cmocka_unit_test(test_clip_grad_norm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
