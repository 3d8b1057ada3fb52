// SPDX-License-Identifier: MIT
//
// test_amp: torch.amp's two halves on the device under test.
//
//   GradScaler against PyTorch: tests/fixtures/amp/*.safetensors (written by
//     tools/fixtures/amp.py from PyTorch's own GradScaler class; see there for
//     which kernels ran) script clean and overflowing steps; ct's scaler, fed
//     the same gradients and plants, must give the same scale and growth
//     tracker after every update, exactly, skip the same steps and leave the
//     same parameters (float32 rounding);
//   skipped steps: a step whose gradients hold an inf or NaN leaves the
//     parameters and the optimizer's state bit for bit, and the run then
//     continues exactly as a run that never saw that step (Adam's bias
//     corrections count only the steps taken), without the host reading
//     found_inf;
//   the state_dict through a checkpoint's metadata: a scaler saved after k
//     steps and loaded into a fresh one continues the scale sequence of an
//     uninterrupted run;
//   PyTorch's errors (unscale_ twice, step twice, update before scale, FP16
//     gradients, bad factors), and autocast's per-thread, nested state.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim_kernels.h"
#include "testutil.h"

// ---- fixtures -------------------------------------------------------------------------------
typedef struct fixture {
  ct_named_tensor *e;
  int n;
} fixture;

static void load(const char *file, fixture *f) {
  const char *dir = getenv("CT_FIXTURE_DIR");
  if (!dir || !*dir) fail_msg("CT_FIXTURE_DIR is not set (ctest sets it to tests/fixtures)");
  char path[1024];
  snprintf(path, sizeof path, "%s/amp/%s", dir, file);
  if (ct_load_safetensors(path, ct_device_cpu(), &f->e, &f->n) != CT_OK)
    fail_msg("loading %s: %s", path, ct_last_error());
}

static ct_tensor *need(const fixture *f, const char *name) {
  for (int i = 0; i < f->n; ++i)
    if (!strcmp(f->e[i].name, name)) return f->e[i].tensor;
  fail_msg("fixture has no tensor \"%s\"", name);
  return NULL;
}

// Row k of a (steps, ...) fixture tensor, on the device under test.
static ct_tensor *row(const fixture *f, const char *name, int64_t k) {
  ct_tensor *all = need(f, name);
  ct_tensor *r = ct_select(all, 0, k);
  ct_tensor *d = r ? ct_to(r, tu_device, ct_dtype_of(r), false) : NULL;
  TU_CHECK(d);
  ct_free(r);
  return d;
}

static double scalar_at(const ct_tensor *t, int64_t k) {
  double *v = tu_to_f64(t);
  double x = v[k];
  free(v);
  return x;
}

// ---- parameters -----------------------------------------------------------------------------
#define NP 2

typedef struct params {
  ct_param p[NP];
  ct_param *ptr[NP];
} params;

static void params_init(params *ps, ct_tensor *const *values) {
  memset(ps, 0, sizeof *ps);
  for (int j = 0; j < NP; ++j) {
    snprintf(ps->p[j].name, sizeof ps->p[j].name, "p%d", j);
    ct_tensor *v = ct_to(values[j], tu_device, CT_F32, false); // may be values[j] itself...
    ps->p[j].value = v ? ct_clone(v) : NULL;                     // ...so each run gets its own copy
    ct_free(v);
    TU_CHECK(ps->p[j].value);
    ps->ptr[j] = &ps->p[j];
  }
}

static void params_free(params *ps) {
  for (int j = 0; j < NP; ++j) ct_free(ps->p[j].value), ct_free(ps->p[j].grad);
}

static void set_grad(ct_param *p, ct_tensor *g) {
  ct_free(p->grad);
  p->grad = g;
}

// t with element idx set to v (a new tensor on t's device).
static ct_tensor *with_element(const ct_tensor *t, int64_t idx, double v) {
  double *x = tu_to_f64(t);
  x[idx] = v;
  ct_tensor *r = tu_from_f64(x, ct_shape_of(t), ct_dtype_of(t), ct_device_of(t));
  free(x);
  TU_CHECK(r);
  return r;
}

// ---- GradScaler against PyTorch -----------------------------------------------------------------
static void replay(const char *file) {
  fixture f;
  load(file, &f);
  double *opt = tu_to_f64(need(&f, "options")); // init, growth, backoff, interval, lr, max_norm
  const int64_t steps = ct_size(need(&f, "scale"), 0);
  ct_tensor *init[NP] = {need(&f, "init.p0"), need(&f, "init.p1")};
  params ps;
  params_init(&ps, init);
  ct_grad_scaler_options o = ct_grad_scaler_defaults();
  o.init_scale = opt[0], o.growth_factor = opt[1], o.backoff_factor = opt[2];
  o.growth_interval = (int64_t)opt[3];
  ct_grad_scaler *s = ct_grad_scaler_create(tu_device.type, o);
  ct_optimizer *sgd = ct_optim_sgd(ps.ptr, NP, ct_sgd_defaults(opt[4]));
  TU_CHECK(s);
  TU_CHECK(sgd);
  const ct_tensor *plant = need(&f, "plant"), *want_scale = need(&f, "scale");
  const ct_tensor *want_tracker = need(&f, "tracker"), *want_found = need(&f, "found_inf");
  double *pl = tu_to_f64(plant);
  int64_t found_total = 0;
  for (int64_t k = 0; k < steps; ++k) {
    char what[128];
    for (int j = 0; j < NP; ++j) { // grads = scaler.scale(g_true), as backward leaves them
      char name[16];
      snprintf(name, sizeof name, "grad.p%d", j);
      ct_tensor *g = row(&f, name, k);
      ct_tensor *sg = ct_grad_scaler_scale(s, g);
      TU_CHECK(sg);
      if ((int)pl[3 * k] == j) {
        ct_tensor *planted = with_element(sg, (int64_t)pl[3 * k + 1], pl[3 * k + 2]);
        ct_free(sg);
        sg = planted;
      }
      set_grad(&ps.p[j], sg);
      ct_free(g);
    }
    if (opt[5] > 0) {
      TU_OK(ct_grad_scaler_unscale_(s, sgd));
      TU_OK(ct_clip_grad_norm_(ps.ptr, NP, opt[5], NULL));
    }
    TU_OK(ct_grad_scaler_step(s, sgd));
    TU_OK(ct_grad_scaler_update(s));
    double scale;
    int64_t tracker, skipped;
    TU_OK(ct_grad_scaler_get_scale(s, &scale));
    TU_OK(ct_grad_scaler_get_growth_tracker(s, &tracker));
    TU_OK(ct_grad_scaler_skipped_steps(s, &skipped));
    found_total += scalar_at(want_found, k) != 0;
    snprintf(what, sizeof what, "%s step %lld", file, (long long)k + 1);
    if (scale != scalar_at(want_scale, k) || tracker != (int64_t)scalar_at(want_tracker, k) ||
        skipped != found_total)
      fail_msg("%s: scale %.9g tracker %lld skipped %lld; PyTorch: scale %.9g tracker %lld skipped %lld", what,
               scale, (long long)tracker, (long long)skipped, scalar_at(want_scale, k),
               (long long)scalar_at(want_tracker, k), (long long)found_total);
    for (int j = 0; j < NP; ++j) {
      char name[16];
      snprintf(name, sizeof name, "param.p%d", j);
      ct_tensor *want = row(&f, name, k);
      double *ref = tu_to_f64(want), big = 0;
      for (int64_t e = 0; e < ct_numel(want); ++e) big = fmax(big, fabs(ref[e]));
      // PyTorch's CPU add_(g, alpha=-lr) fuses the multiply-add (one rounding, ct rounds
      // twice), so the walks drift apart by float32 roundings, at most ~k ulp after k
      // steps; a step taken or skipped wrongly moves a parameter by lr * |g|, ~1e3 times more.
      tu_assert_close(ps.p[j].value, ref, 1e-6, 1e-4 * big, what);
      free(ref);
      ct_free(want);
    }
  }
  printf("%s: %lld steps, %lld skipped, scale and tracker equal PyTorch's at every step\n", file,
         (long long)steps, (long long)found_total);
  free(pl), free(opt);
  ct_optimizer_free(sgd);
  ct_grad_scaler_free(s);
  params_free(&ps);
  ct_named_tensors_free(f.e, f.n);
}

static void test_scale_sequence_torch(void **state) {
  (void)state;
  replay("defaults.safetensors");
  replay("clip_interval3.safetensors");
  replay("no_overflow.safetensors");
}

// ---- skipped steps ----------------------------------------------------------------------------
static ct_optimizer *make_opt(int kind, params *ps) {
  if (kind == 0) {
    ct_sgd_options o = ct_sgd_defaults(0.1);
    o.momentum = 0.9, o.weight_decay = 1e-2;
    return ct_optim_sgd(ps->ptr, NP, o);
  }
  ct_adam_options o = kind == 1 ? ct_adam_defaults() : ct_adamw_defaults();
  o.lr = 1e-2;
  return kind == 1 ? ct_optim_adam(ps->ptr, NP, o) : ct_optim_adamw(ps->ptr, NP, o);
}

// Runs the gradient list through scale/step/update; grads[k] == NULL rows
// are poisoned (a NaN in p0's, an inf in p1's). Leaves the parameters in ps.
static void run_steps(int kind, ct_tensor *const *init, ct_tensor *(*grads)[NP], const bool *poison, int steps,
                      params *ps, ct_optimizer **opt_out, int check_skip_at) {
  params_init(ps, init);
  ct_grad_scaler_options so = ct_grad_scaler_defaults();
  so.init_scale = 256.0;
  ct_grad_scaler *s = ct_grad_scaler_create(tu_device.type, so);
  ct_optimizer *opt = make_opt(kind, ps);
  TU_CHECK(s);
  TU_CHECK(opt);
  for (int k = 0; k < steps; ++k) {
    for (int j = 0; j < NP; ++j) {
      ct_tensor *sg = ct_grad_scaler_scale(s, grads[k][j]);
      TU_CHECK(sg);
      if (poison[k]) {
        ct_tensor *bad = with_element(sg, 1, j == 0 ? NAN : -INFINITY);
        ct_free(sg);
        sg = bad;
      }
      set_grad(&ps->p[j], sg);
    }
    double *before[NP], *state_before = NULL;
    int64_t step_before = cti_optimizer_state_step(opt, 0);
    if (k == check_skip_at) {
      for (int j = 0; j < NP; ++j) before[j] = tu_to_f64(ps->p[j].value);
      const ct_tensor *st = cti_optimizer_state_tensor(opt, 0, kind == 0 ? "momentum_buffer" : "exp_avg");
      state_before = st ? tu_to_f64(st) : NULL;
    }
    TU_OK(ct_grad_scaler_step(s, opt));
    TU_OK(ct_grad_scaler_update(s));
    if (k == check_skip_at) { // the poisoned step: nothing written
      for (int j = 0; j < NP; ++j) {
        double *after = tu_to_f64(ps->p[j].value);
        if (memcmp(after, before[j], (size_t)ct_numel(ps->p[j].value) * sizeof(double)) != 0)
          fail_msg("optimizer %d: the skipped step changed parameter %d", kind, j);
        free(after), free(before[j]);
      }
      const ct_tensor *st = cti_optimizer_state_tensor(opt, 0, kind == 0 ? "momentum_buffer" : "exp_avg");
      if (state_before) {
        double *sa = tu_to_f64(st);
        if (memcmp(sa, state_before, (size_t)ct_numel(st) * sizeof(double)) != 0)
          fail_msg("optimizer %d: the skipped step changed the optimizer state", kind);
        free(sa);
      }
      free(state_before);
      assert_int_equal(cti_optimizer_state_step(opt, 0), step_before);
      int64_t skipped;
      TU_OK(ct_grad_scaler_skipped_steps(s, &skipped));
      assert_int_equal(skipped, 1);
    }
  }
  ct_grad_scaler_free(s);
  *opt_out = opt;
}

static void test_skipped_steps(void **state) {
  (void)state;
  enum { STEPS = 5 };
  ct_tensor *init[NP] = {ct_randn(CT_SHAPE(6, 5), CT_F32, ct_device_cpu()),
                         ct_randn(CT_SHAPE(5), CT_F32, ct_device_cpu())};
  ct_tensor *grads[STEPS][NP];
  for (int k = 0; k < STEPS; ++k)
    for (int j = 0; j < NP; ++j) grads[k][j] = ct_randn(ct_shape_of(init[j]), CT_F32, tu_device);
  // Run A sees the steps 0, 1, X, 2, 3 (X poisoned at index 2); run B 0, 1, 2, 3.
  ct_tensor *ga[STEPS][NP], *gb[STEPS - 1][NP];
  const bool pa[STEPS] = {false, false, true, false, false}, pb[STEPS - 1] = {false, false, false, false};
  for (int j = 0; j < NP; ++j) {
    ga[0][j] = grads[0][j], ga[1][j] = grads[1][j], ga[2][j] = grads[4][j];
    ga[3][j] = grads[2][j], ga[4][j] = grads[3][j];
    for (int k = 0; k < STEPS - 1; ++k) gb[k][j] = grads[k][j];
  }
  for (int kind = 0; kind < 3; ++kind) {
    params a, b;
    ct_optimizer *oa, *ob;
    run_steps(kind, init, ga, pa, STEPS, &a, &oa, 2);
    run_steps(kind, init, gb, pb, STEPS - 1, &b, &ob, -1);
    for (int j = 0; j < NP; ++j) { // the skipped step left no trace
      double *x = tu_to_f64(a.p[j].value), *y = tu_to_f64(b.p[j].value);
      if (memcmp(x, y, (size_t)ct_numel(a.p[j].value) * sizeof(double)) != 0)
        fail_msg("optimizer %d: after a skipped step, parameter %d differs from the run without it", kind, j);
      free(x), free(y);
    }
    assert_int_equal(cti_optimizer_state_step(oa, 0), STEPS - 1);
    assert_int_equal(cti_optimizer_state_step(ob, 0), STEPS - 1);
    ct_optimizer_free(oa), ct_optimizer_free(ob);
    params_free(&a), params_free(&b);
  }
  for (int k = 0; k < STEPS; ++k)
    for (int j = 0; j < NP; ++j) ct_free(grads[k][j]);
  ct_free(init[0]), ct_free(init[1]);
}

// ---- state_dict through a checkpoint ------------------------------------------------------------
// The metadata of a safetensors file (its tensors loaded and dropped).
static int metadata_of(const char *path, char ***pairs) {
  ct_named_tensor *e = NULL;
  int n = 0;
  int rc = ct_load_safetensors_with_metadata(path, ct_device_cpu(), &e, &n, pairs);
  ct_named_tensors_free(e, n);
  return rc;
}

// One scale/step/update with gradient g (poisoned when bad).
static void one_step(ct_grad_scaler *s, ct_optimizer *opt, params *ps, const ct_tensor *g, bool bad) {
  for (int j = 0; j < NP; ++j) {
    ct_tensor *gj = j == 0 ? ct_retain((ct_tensor *)g) : ct_zeros(ct_shape_of(ps->p[1].value), CT_F32, tu_device);
    ct_tensor *sg = ct_grad_scaler_scale(s, gj);
    TU_CHECK(sg);
    if (bad && j == 0) {
      ct_tensor *x = with_element(sg, 0, INFINITY);
      ct_free(sg);
      sg = x;
    }
    set_grad(&ps->p[j], sg);
    ct_free(gj);
  }
  TU_OK(ct_grad_scaler_step(s, opt));
  TU_OK(ct_grad_scaler_update(s));
}

static void test_state_dict_checkpoint(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(tu_scratch_dir(dir, sizeof dir, "amp"), 0);
  ct_tensor *init[NP] = {ct_randn(CT_SHAPE(4, 3), CT_F32, ct_device_cpu()),
                         ct_randn(CT_SHAPE(2), CT_F32, ct_device_cpu())};
  ct_tensor *g = ct_randn(CT_SHAPE(4, 3), CT_F32, tu_device);
  ct_grad_scaler_options o = ct_grad_scaler_defaults();
  o.growth_interval = 4;
  enum { K = 7, N = 20 };
  const int bad_at[] = {1, 9, 10}; // steps (0-based) that overflow
  params pa, pb;
  params_init(&pa, init);
  params_init(&pb, init);
  ct_grad_scaler *whole = ct_grad_scaler_create(tu_device.type, o);
  ct_grad_scaler *first = ct_grad_scaler_create(tu_device.type, o);
  ct_optimizer *oa = ct_optim_sgd(pa.ptr, NP, ct_sgd_defaults(1e-3));
  ct_optimizer *ob = ct_optim_sgd(pb.ptr, NP, ct_sgd_defaults(1e-3));
  double want[N];
  for (int k = 0; k < N; ++k) {
    bool bad = k == bad_at[0] || k == bad_at[1] || k == bad_at[2];
    one_step(whole, oa, &pa, g, bad);
    TU_OK(ct_grad_scaler_get_scale(whole, &want[k]));
    if (k < K) one_step(first, ob, &pb, g, bad);
  }
  // Save after K steps: the model's tensors and the scaler's state as metadata.
  ct_grad_scaler_state st;
  TU_OK(ct_grad_scaler_state_dict(first, &st));
  ct_grad_scaler_metadata md;
  ct_grad_scaler_state_to_metadata(&st, &md);
  ct_named_tensor entries[NP];
  for (int j = 0; j < NP; ++j) {
    snprintf(entries[j].name, sizeof entries[j].name, "p%d", j);
    entries[j].tensor = pb.p[j].value;
  }
  const char *path = tu_scratch_path(dir, "resume.safetensors");
  TU_OK(ct_save_safetensors(path, entries, NP, md.pairs));
  ct_grad_scaler_free(first);
  // Resume: a fresh scaler from the file's metadata.
  char **pairs = NULL;
  TU_OK(metadata_of(path, &pairs));
  ct_grad_scaler_state back;
  TU_OK(ct_grad_scaler_state_from_metadata((const char *const *)pairs, &back));
  assert_true(back.scale == st.scale && back.growth_tracker == st.growth_tracker &&
              back.growth_interval == st.growth_interval && back.growth_factor == st.growth_factor &&
              back.backoff_factor == st.backoff_factor);
  ct_grad_scaler *resumed = ct_grad_scaler_create(tu_device.type, ct_grad_scaler_defaults());
  TU_OK(ct_grad_scaler_load_state_dict(resumed, &back));
  for (int k = K; k < N; ++k) {
    bool bad = k == bad_at[0] || k == bad_at[1] || k == bad_at[2];
    one_step(resumed, ob, &pb, g, bad);
    double got;
    TU_OK(ct_grad_scaler_get_scale(resumed, &got));
    if (got != want[k])
      fail_msg("resumed at step %d: scale %g at step %d, the uninterrupted run had %g", K, got, k, want[k]);
  }
  // A file without the scaler's keys says so.
  ct_metadata_free(pairs);
  const char *plain = tu_scratch_path(dir, "plain.safetensors");
  TU_OK(ct_save_safetensors(plain, entries, NP, NULL));
  TU_OK(metadata_of(plain, &pairs));
  assert_null(pairs[0]);
  assert_int_not_equal(ct_grad_scaler_state_from_metadata((const char *const *)pairs, &back), CT_OK);
  tu_assert_error_contains("scaler.scale", "metadata without the scaler");
  ct_metadata_free(pairs);
  ct_grad_scaler_free(whole), ct_grad_scaler_free(resumed);
  ct_optimizer_free(oa), ct_optimizer_free(ob);
  params_free(&pa), params_free(&pb);
  ct_free(g), ct_free(init[0]), ct_free(init[1]);
  tu_scratch_remove(dir);
}

// ---- errors -----------------------------------------------------------------------------------
static void test_errors(void **state) {
  (void)state;
  ct_grad_scaler_options o = ct_grad_scaler_defaults();
  o.growth_factor = 1.0;
  assert_null(ct_grad_scaler_create(tu_device.type, o));
  tu_assert_error_contains("The growth factor must be > 1.0.", "growth factor 1");
  o = ct_grad_scaler_defaults();
  o.backoff_factor = 1.0;
  assert_null(ct_grad_scaler_create(tu_device.type, o));
  tu_assert_error_contains("The backoff factor must be < 1.0", "backoff factor 1");

  ct_tensor *init[NP] = {ct_ones(CT_SHAPE(2, 2), CT_F32, ct_device_cpu()), ct_ones(CT_SHAPE(3), CT_F32, ct_device_cpu())};
  params ps;
  params_init(&ps, init);
  ct_grad_scaler *s = ct_grad_scaler_create(tu_device.type, ct_grad_scaler_defaults());
  ct_optimizer *opt = ct_optim_sgd(ps.ptr, NP, ct_sgd_defaults(0.1));
  assert_int_not_equal(ct_grad_scaler_update(s), CT_OK);
  tu_assert_error_contains("Attempted update but _scale is None", "update before scale");
  assert_int_not_equal(ct_grad_scaler_unscale_(s, opt), CT_OK);
  tu_assert_error_contains("Attempted unscale_ but _scale is None", "unscale_ before scale");
  for (int j = 0; j < NP; ++j) set_grad(&ps.p[j], ct_grad_scaler_scale(s, ps.p[j].value));
  assert_int_not_equal(ct_grad_scaler_update(s), CT_OK);
  tu_assert_error_contains("No inf checks were recorded prior to update.", "update before step");
  TU_OK(ct_grad_scaler_unscale_(s, opt));
  assert_int_not_equal(ct_grad_scaler_unscale_(s, opt), CT_OK);
  tu_assert_error_contains("unscale_() has already been called on this optimizer since the last update().",
                           "unscale_ twice");
  TU_OK(ct_grad_scaler_step(s, opt));
  assert_int_not_equal(ct_grad_scaler_step(s, opt), CT_OK);
  tu_assert_error_contains("step() has already been called since the last update().", "step twice");
  assert_int_not_equal(ct_grad_scaler_unscale_(s, opt), CT_OK);
  tu_assert_error_contains("unscale_() is being called after step().", "unscale_ after step");
  TU_OK(ct_grad_scaler_update(s));
  // FP16 gradients: PyTorch refuses to unscale them.
  set_grad(&ps.p[0], ct_zeros(CT_SHAPE(2, 2), CT_F16, tu_device));
  assert_int_not_equal(ct_grad_scaler_unscale_(s, opt), CT_OK);
  tu_assert_error_contains("Attempting to unscale FP16 gradients.", "fp16 grads");
  // A disabled scaler passes everything through.
  o = ct_grad_scaler_defaults();
  o.enabled = false;
  ct_grad_scaler *off = ct_grad_scaler_create(tu_device.type, o);
  ct_tensor *x = ct_grad_scaler_scale(off, ps.p[1].value);
  assert_ptr_equal(x, ps.p[1].value);
  double sc;
  TU_OK(ct_grad_scaler_get_scale(off, &sc));
  assert_true(sc == 1.0);
  ct_free(x);
  ct_grad_scaler_free(off);
  ct_grad_scaler_free(s);
  ct_optimizer_free(opt);
  params_free(&ps);
  ct_free(init[0]), ct_free(init[1]);
}

// ---- autocast's state -------------------------------------------------------------------------
static void *other_thread(void *arg) {
  *(bool *)arg = ct_is_autocast_enabled(CT_CPU) || ct_is_autocast_enabled(CT_CUDA);
  return NULL;
}

static void test_autocast_state(void **state) {
  (void)state;
  assert_false(ct_is_autocast_enabled(CT_CUDA));
  assert_int_equal(ct_get_autocast_dtype(CT_CUDA), CT_F16); // PyTorch's defaults
  assert_int_equal(ct_get_autocast_dtype(CT_CPU), CT_BF16);
  TU_OK(ct_autocast_enter(CT_CUDA, CT_BF16, true));
  assert_true(ct_is_autocast_enabled(CT_CUDA));
  assert_false(ct_is_autocast_enabled(CT_CPU)); // per device type
  assert_int_equal(ct_autocast_compute_dtype(ct_device_cuda(0), CT_F32), CT_BF16);
  assert_int_equal(ct_autocast_compute_dtype(ct_device_cuda(0), CT_F64), CT_F64); // never cast
  assert_int_equal(ct_autocast_compute_dtype(ct_device_cpu(), CT_F32), CT_F32);
  bool seen = true;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, other_thread, &seen), 0);
  pthread_join(th, NULL);
  assert_false(seen); // per thread
  TU_OK(ct_autocast_enter(CT_CUDA, CT_F16, false)); // a nested region switched off
  assert_false(ct_is_autocast_enabled(CT_CUDA));
  TU_OK(ct_autocast_exit());
  assert_true(ct_is_autocast_enabled(CT_CUDA));
  assert_int_equal(ct_get_autocast_dtype(CT_CUDA), CT_BF16);
  TU_OK(ct_autocast_exit());
  assert_false(ct_is_autocast_enabled(CT_CUDA));
  assert_int_equal(ct_get_autocast_dtype(CT_CUDA), CT_F16);
  assert_int_not_equal(ct_autocast_exit(), CT_OK);
  tu_assert_error_contains("no autocast region", "exit without enter");
  assert_int_not_equal(ct_autocast_enter(CT_CPU, CT_F32, true), CT_OK);
  tu_assert_error_contains("float16 or bfloat16", "autocast to float32");
  // ct_autocast_lower: f32 -> the autocast dtype on its device type only.
  ct_tensor *x = ct_randn(CT_SHAPE(3, 4), CT_F32, tu_device);
  TU_OK(ct_autocast_enter(tu_device.type, CT_BF16, true));
  ct_tensor *lo = ct_autocast_lower(x);
  TU_OK(ct_autocast_exit());
  ct_tensor *same = ct_autocast_lower(x);
  assert_int_equal(ct_dtype_of(lo), CT_BF16);
  assert_ptr_equal(same, x);
  ct_free(x), ct_free(lo), ct_free(same);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scale_sequence_torch),
      cmocka_unit_test(test_skipped_steps),
      cmocka_unit_test(test_state_dict_checkpoint),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_autocast_state),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
