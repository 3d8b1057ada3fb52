// SPDX-License-Identifier: MIT
//
// test_profiler: the profiler on the device under test.
//
// Invariants checked, each against what the runtime itself knows apart from
// the profiler: ranges nest on every thread (a child lies inside its parent,
// its depth one more); a training step's events show the modules and the
// ops the model runs (Conv2d's im2col and GEMM inside "Conv2d.forward");
// key_averages' self CPU times add up to the outermost ranges' time; memory
// events add up to what the allocator's statistics moved, and each one's
// "total allocated" is the allocator's running total; the schedule records
// exactly the active steps; threads get their own tracks; with no session
// the dispatcher hands out the real backend; misuse fails with a message.
// On CUDA, every op has its device time and its kernel lies on the device's
// timeline.
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "prof_impl.h"
#include "testutil.h"

// conv(1->4) bn relu pool(2) flatten linear(4*4*4 -> 10) on 8x8 images.
static ct_module *small_cnn(void) {
  ct_module *mods[] = {ct_nn_conv2d(1, 4, 3, 1, 1, true), ct_nn_batchnorm2d(4, 1e-5, 0.1), ct_nn_relu(),
                       ct_nn_maxpool2d(2, 0), ct_nn_flatten(), ct_nn_linear(64, 10, true)};
  ct_module *m = ct_nn_sequential(6, mods);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

typedef struct batch {
  ct_tensor *x, *y;
} batch;

static batch make_batch(int64_t n) {
  batch b = {ct_randn(CT_SHAPE(n, 1, 8, 8), CT_F32, tu_device), NULL};
  TU_CHECK(b.x);
  ct_tensor *yc = ct_empty(CT_SHAPE(n), CT_I64, ct_device_cpu());
  TU_CHECK(yc);
  int64_t *y = ct_data_ptr(yc);
  for (int64_t i = 0; i < n; ++i) y[i] = i % 10;
  b.y = ct_to_device(yc, tu_device);
  TU_CHECK(b.y);
  ct_free(yc);
  return b;
}

static void free_batch(batch b) {
  ct_free(b.x);
  ct_free(b.y);
}

static void train_step(ct_module *m, ct_optimizer *opt, batch b) {
  ct_record_function_begin("zero_grad");
  TU_OK(ct_optimizer_zero_grad(opt, true));
  TU_OK(ct_record_function_end());
  ct_record_function_begin("forward");
  ct_tensor *logits = ct_module_forward(m, b.x);
  TU_CHECK(logits);
  ct_tensor *g = NULL;
  ct_tensor *loss = ct_cross_entropy_loss(logits, b.y, &g);
  TU_CHECK(loss);
  TU_OK(ct_record_function_end());
  ct_record_function_begin("backward");
  TU_OK(ct_module_backward_params(m, g));
  TU_OK(ct_record_function_end());
  ct_record_function_begin("optimizer");
  TU_OK(ct_optimizer_step(opt));
  TU_OK(ct_record_function_end());
  ct_free(loss);
  ct_free(g);
  ct_free(logits);
}

static ct_optimizer *adam_for(ct_module *m) {
  int np = 0;
  ct_param **p = ct_module_parameters(m, &np);
  ct_optimizer *opt = ct_optim_adam(p, np, ct_adam_defaults());
  TU_CHECK(opt);
  return opt;
}

static bool is_range(const ct_profiler_event *e) {
  return e->kind != CT_EVENT_MEMORY && e->kind != CT_EVENT_KERNEL;
}

static int find(const ct_profiler_event *ev, int n, const char *name, int from) {
  for (int i = from; i < n; ++i)
    if (!strcmp(ev[i].name, name) && is_range(&ev[i])) return i;
  return -1;
}

// Every range inside its parent, on the parent's thread, one level deeper.
static void assert_nesting(const ct_profiler_event *ev, int n) {
  for (int i = 0; i < n; ++i) {
    const ct_profiler_event *e = &ev[i];
    if (e->parent < 0) {
      assert_int_equal(e->depth, 0);
      continue;
    }
    assert_true(e->parent < i);
    const ct_profiler_event *p = &ev[e->parent];
    assert_true(is_range(p));
    assert_int_equal(e->tid, p->tid);
    assert_int_equal(e->depth, p->depth + 1);
    if (e->ts_us < p->ts_us || e->ts_us + e->dur_us > p->ts_us + p->dur_us + 1e-6)
      fail_msg("%s [%.3f, %.3f] is not inside its parent %s [%.3f, %.3f]", e->name, e->ts_us,
               e->ts_us + e->dur_us, p->name, p->ts_us, p->ts_us + p->dur_us);
  }
}

static void test_step_events_nest(void **state) {
  (void)state;
  ct_module *m = small_cnn();
  ct_optimizer *opt = adam_for(m);
  batch b = make_batch(16);
  train_step(m, opt, b); // warm: the optimizer's state exists
  ct_profiler_options o = ct_profiler_defaults();
  o.record_shapes = true;
  ct_profiler *p = ct_profiler_start(&o);
  TU_CHECK(p);
  assert_true(ct_profiler_enabled());
  ct_record_function_begin("step");
  train_step(m, opt, b);
  TU_OK(ct_record_function_end());
  TU_OK(ct_profiler_stop(p));
  assert_false(ct_profiler_enabled());
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  assert_true(n > 20);
  assert_nesting(ev, n);
  int step = find(ev, n, "step", 0), fwd = find(ev, n, "forward", 0);
  assert_true(step >= 0 && fwd >= 0);
  assert_int_equal(ev[step].depth, 0);
  assert_int_equal(ev[fwd].parent, step);
  // Conv2d.forward holds an im2col and a GEMM, and the GEMM's shapes are the
  // weight (4, 1*3*3) times the columns: on the CPU one product over the
  // chunk's 16 images side by side, (9, 16*8*8) (nn_conv.c's chunk_gemm);
  // on CUDA a batched product, (9, 8*8) for each of the 16 images.
  int conv = find(ev, n, "Conv2d.forward", 0);
  assert_true(conv >= 0);
  assert_string_equal(ev[conv].shapes, "[[16, 1, 8, 8]]");
  int im2col = find(ev, n, "ct::im2col", conv), gemm = find(ev, n, "ct::gemm", conv);
  assert_true(im2col > conv && gemm > conv);
  assert_int_equal(ev[im2col].parent, conv);
  assert_int_equal(ev[gemm].parent, conv);
  assert_int_equal(ev[gemm].kind, CT_EVENT_OP);
  assert_string_equal(ev[gemm].shapes, tu_device.type == CT_CPU ? "[[4, 9], [9, 1024]]" : "[[16, 4, 9], [16, 9, 64]]");
  int seq = find(ev, n, "Sequential.forward", 0);
  assert_true(seq >= 0 && ev[conv].parent == seq && ev[seq].parent == fwd);
  // backward and the optimizer, with torch's names
  assert_true(find(ev, n, "Conv2d.backward", 0) >= 0);
  assert_true(find(ev, n, "BatchNorm2d.backward", 0) >= 0);
  int ostep = find(ev, n, "Optimizer.step#Adam.step", 0);
  assert_true(ostep >= 0);
  int adam = find(ev, n, "ct::adam_step", ostep);
  assert_true(adam >= 0 && ev[adam].parent == ostep);
  assert_true(find(ev, n, "Optimizer.zero_grad#Adam.zero_grad", 0) >= 0);
  assert_true(find(ev, n, "ct::cross_entropy", fwd) >= 0);
  // self time: the duration less the children's
  double kids = 0;
  for (int i = 0; i < n; ++i)
    if (ev[i].parent == fwd && is_range(&ev[i])) kids += ev[i].dur_us;
  assert_true(fabs(ev[fwd].self_cpu_us - (ev[fwd].dur_us - kids)) < 1e-6);
  ct_profiler_free(p);
  free_batch(b);
  ct_optimizer_free(opt);
  ct_module_free(m);
}

// The rows' self CPU times add up to the outermost ranges' durations, which
// is the table's "Self CPU time total"; every row's count is its events'.
static void test_key_averages_add_up(void **state) {
  (void)state;
  ct_module *m = small_cnn();
  ct_optimizer *opt = adam_for(m);
  batch b = make_batch(8);
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  for (int i = 0; i < 3; ++i) {
    ct_record_function_begin("step");
    train_step(m, opt, b);
    TU_OK(ct_record_function_end());
  }
  TU_OK(ct_profiler_stop(p));
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  double roots = 0, device_roots = 0;
  int gemms = 0;
  for (int i = 0; i < n; ++i) {
    if (is_range(&ev[i]) && ev[i].parent < 0) roots += ev[i].dur_us;
    if (is_range(&ev[i]) && ev[i].parent < 0) device_roots += ev[i].device_total_us;
    gemms += is_range(&ev[i]) && !strcmp(ev[i].name, "ct::gemm");
  }
  ct_profiler_averages *a = ct_profiler_key_averages(p, false);
  TU_CHECK(a);
  double self = 0, dev = 0;
  for (int i = 0; i < a->n; ++i) {
    self += a->rows[i].self_cpu_us;
    dev += a->rows[i].self_device_us;
    assert_true(a->rows[i].self_cpu_us <= a->rows[i].cpu_total_us + 1e-6);
    if (!strcmp(a->rows[i].name, "ct::gemm")) assert_int_equal(a->rows[i].count, gemms);
    if (!strcmp(a->rows[i].name, "step")) assert_int_equal(a->rows[i].count, 3);
  }
  assert_true(fabs(self - roots) <= 1e-6 * roots + 1e-3);
  assert_true(fabs(a->self_cpu_total_us - roots) <= 1e-6 * roots + 1e-3);
  assert_true(fabs(dev - device_roots) <= 1e-6 * device_roots + 1e-3);
  assert_int_equal(a->has_device, tu_device.type == CT_CUDA);
  // sorted by self CPU time: descending
  TU_OK(ct_profiler_averages_sort(a, "self_cpu_time_total"));
  for (int i = 1; i < a->n; ++i) assert_true(a->rows[i - 1].self_cpu_us >= a->rows[i].self_cpu_us);
  TU_OK(ct_profiler_averages_sort(a, "count"));
  for (int i = 1; i < a->n; ++i) assert_true(a->rows[i - 1].count >= a->rows[i].count);
  TU_OK(ct_profiler_averages_sort(a, "name"));
  for (int i = 1; i < a->n; ++i) assert_true(strcmp(a->rows[i - 1].name, a->rows[i].name) <= 0);
  assert_int_not_equal(ct_profiler_averages_sort(a, "self_gpu_time"), 0);
  tu_assert_error_contains("self_cpu_time_total", "unknown sort key lists the known ones");
  char *table = ct_profiler_table(a, "cpu_time_total", 5);
  TU_CHECK(table);
  assert_non_null(strstr(table, "Self CPU %"));
  assert_non_null(strstr(table, "# of Calls"));
  assert_non_null(strstr(table, "Self CPU time total: "));
  assert_true((strstr(table, "Self CUDA") != NULL) == (tu_device.type == CT_CUDA));
  free(table);
  ct_profiler_averages_free(a);
  ct_profiler_free(p);
  free_batch(b);
  ct_optimizer_free(opt);
  ct_module_free(m);
}

// Memory events against the allocator's own statistics.
static void test_memory_balances(void **state) {
  (void)state;
  ct_module *m = small_cnn();
  ct_optimizer *opt = adam_for(m);
  batch b = make_batch(8);
  train_step(m, opt, b);
  ct_profiler_options o = ct_profiler_defaults();
  o.profile_memory = true;
  size_t before = ct_memory_allocated(tu_device);
  ct_profiler *p = ct_profiler_start(&o);
  TU_CHECK(p);
  ct_record_function_begin("step");
  train_step(m, opt, b);
  ct_tensor *keep = ct_zeros(CT_SHAPE(1000), CT_F32, tu_device); // alive past the stop: net > 0
  TU_CHECK(keep);
  TU_OK(ct_record_function_end());
  TU_OK(ct_profiler_stop(p));
  size_t after = ct_memory_allocated(tu_device);
  int n = 0, nmem = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  int64_t net = 0, running = (int64_t)before;
  bool cuda = tu_device.type == CT_CUDA;
  for (int i = 0; i < n; ++i) {
    if (ev[i].kind != CT_EVENT_MEMORY || !ct_device_eq(ev[i].device, tu_device)) continue;
    nmem++;
    net += ev[i].bytes;
    running += ev[i].bytes;
    assert_true(ev[i].bytes % 512 == 0 && ev[i].bytes != 0); // the allocator's rounded sizes
    if ((int64_t)ev[i].total_allocated != running)
      fail_msg("memory event %d: total allocated %llu, the running sum %lld", i,
               (unsigned long long)ev[i].total_allocated, (long long)running);
  }
  assert_true(nmem > 10);
  assert_int_equal(net, (int64_t)after - (int64_t)before);
  assert_true(net >= 4096);
  // attributed to ranges: the rows' self memory is the same net amount, and
  // the "step" range holds all of it
  ct_profiler_averages *a = ct_profiler_key_averages(p, false);
  TU_CHECK(a);
  int64_t rows = 0;
  for (int i = 0; i < a->n; ++i) rows += cuda ? a->rows[i].self_device_mem : a->rows[i].self_cpu_mem;
  assert_int_equal(rows, net);
  int step = find(ev, n, "step", 0);
  assert_int_equal(ev[step].mem[cuda], net);
  char *table = ct_profiler_table(a, "self_cpu_memory_usage", 0);
  TU_CHECK(table);
  assert_non_null(strstr(table, "Self CPU Mem"));
  free(table);
  ct_profiler_averages_free(a);
  ct_profiler_free(p);
  ct_free(keep);
  free_batch(b);
  ct_optimizer_free(opt);
  ct_module_free(m);
}

typedef struct trace_count {
  int calls;
  int events;
} trace_count;

static void on_ready(ct_profiler *p, void *ctx) {
  trace_count *c = ctx;
  c->calls++;
  ct_profiler_events(p, &c->events);
}

// wait 1, warmup 1, active 2, repeat 1 over 6 steps: only steps 2 and 3.
static void test_schedule(void **state) {
  (void)state;
  trace_count c = {0, 0};
  ct_profiler_options o = ct_profiler_defaults();
  o.schedule = (ct_profiler_schedule){.wait = 1, .warmup = 1, .active = 2, .repeat = 1};
  o.on_trace_ready = on_ready;
  o.ctx = &c;
  ct_profiler *p = ct_profiler_start(&o);
  TU_CHECK(p);
  ct_tensor *x = ct_ones(CT_SHAPE(64), CT_F32, tu_device);
  TU_CHECK(x);
  for (int s = 0; s < 6; ++s) {
    char name[32];
    snprintf(name, sizeof name, "iter %d", s);
    ct_record_function_begin(name);
    ct_tensor *y = ct_binary(CT_OP_ADD, x, x);
    TU_CHECK(y);
    ct_free(y);
    TU_OK(ct_record_function_end());
    assert_int_equal(ct_profiler_enabled(), s >= 1 && s <= 3); // warmup (1), active (2, 3)
    TU_OK(ct_profiler_step(p));
  }
  TU_OK(ct_profiler_stop(p));
  assert_int_equal(c.calls, 1);
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  assert_int_equal(n, c.events);
  for (int s = 0; s < 6; ++s) {
    char it[32], ps[32];
    snprintf(it, sizeof it, "iter %d", s);
    snprintf(ps, sizeof ps, "ProfilerStep#%d", s);
    int i = find(ev, n, it, 0), k = find(ev, n, ps, 0);
    if (s == 2 || s == 3) {
      assert_true(i >= 0 && k >= 0);
      assert_int_equal(ev[i].parent, k);
      assert_int_equal(ev[k].kind, CT_EVENT_STEP);
      assert_true(find(ev, n, "ct::add", i) > i);
    } else {
      assert_true(i < 0 && k < 0);
    }
  }
  assert_nesting(ev, n);
  ct_free(x);
  ct_profiler_free(p);
}

typedef struct worker {
  int tid_seen;
  int rc;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  ct_record_function_begin("worker");
  ct_tensor *x = ct_ones(CT_SHAPE(256), CT_F32, ct_device_cpu());
  ct_tensor *y = x ? ct_unary(CT_OP_EXP, x) : NULL;
  w->rc = y ? CT_OK : -1;
  ct_free(x);
  ct_free(y);
  if (ct_record_function_end() != CT_OK) w->rc = -1;
  return NULL;
}

static void test_threads_get_own_tracks(void **state) {
  (void)state;
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  ct_record_function_begin("main");
  pthread_t t[2];
  worker w[2] = {{0, 0}, {0, 0}};
  for (int i = 0; i < 2; ++i) assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  TU_OK(ct_record_function_end());
  TU_OK(ct_profiler_stop(p));
  assert_int_equal(w[0].rc, 0);
  assert_int_equal(w[1].rc, 0);
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  int main_i = find(ev, n, "main", 0);
  int w1 = find(ev, n, "worker", 0), w2 = w1 >= 0 ? find(ev, n, "worker", w1 + 1) : -1;
  assert_true(main_i >= 0 && w1 >= 0 && w2 >= 0);
  assert_int_not_equal(ev[w1].tid, ev[main_i].tid);
  assert_int_not_equal(ev[w1].tid, ev[w2].tid);
  assert_int_equal(ev[w1].parent, -1); // a worker's range is a root on its own thread
  int e = find(ev, n, "ct::exp", w1);
  assert_true(e >= 0 && ev[e].tid == ev[w1].tid);
  assert_nesting(ev, n);
  ct_profiler_free(p);
}

// DataParallel's replicas run on threads of their own: each replica's
// module ranges are on its thread's track, nested there.
static void test_data_parallel_replicas_get_tracks(void **state) {
  (void)state;
  ct_module *m = small_cnn();
  ct_device devs[2] = {tu_device, tu_device};
  ct_data_parallel *dp = ct_data_parallel_create(m, devs, 2);
  TU_CHECK(dp);
  batch b = make_batch(8);
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  ct_tensor *y = ct_data_parallel_forward(dp, b.x);
  TU_CHECK(y);
  TU_OK(ct_profiler_stop(p));
  int n = 0, tids[8], nt = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  for (int i = 0; i < n; ++i) {
    if (strcmp(ev[i].name, "Linear.forward")) continue;
    bool seen = false;
    for (int k = 0; k < nt; ++k) seen |= tids[k] == ev[i].tid;
    if (!seen && nt < 8) tids[nt++] = ev[i].tid;
    int gemm = find(ev, n, "ct::gemm", i);
    assert_true(gemm > i && ev[gemm].parent == i && ev[gemm].tid == ev[i].tid);
  }
  assert_int_equal(nt, 2); // one Linear.forward per replica, each on its own thread
  assert_nesting(ev, n);
  ct_profiler_free(p);
  ct_free(y);
  free_batch(b);
  ct_data_parallel_free(dp);
  ct_module_free(m);
}

// Off: the real backend, nothing recorded; misuse is an error, not a crash.
static void test_off_and_misuse(void **state) {
  (void)state;
  assert_false(ct_profiler_enabled());
  assert_ptr_equal(cti_backend_for("test", ct_device_cpu()), &cti_cpu_backend);
  assert_int_not_equal(ct_record_function_end(), 0);
  tu_assert_error_contains("no range is open", "end without begin");
  ct_record_function_begin("unrecorded"); // balanced while off: fine
  TU_OK(ct_record_function_end());
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  assert_ptr_not_equal(cti_backend_for("test", ct_device_cpu()), &cti_cpu_backend);
  assert_null(ct_profiler_start(NULL));
  tu_assert_error_contains("already running", "a second session");
  TU_OK(ct_profiler_stop(p));
  assert_ptr_equal(cti_backend_for("test", ct_device_cpu()), &cti_cpu_backend);
  assert_int_not_equal(ct_profiler_export_chrome_trace(p, "/nonexistent-dir/trace.json"), 0);
  tu_assert_error_contains("/nonexistent-dir/trace.json", "export to a missing folder");
  ct_profiler_free(p);
  ct_profiler_options o = ct_profiler_defaults();
  o.schedule.wait = 2; // active 0 with other counts set
  assert_null(ct_profiler_start(&o));
  tu_assert_error_contains("bad schedule", "schedule without active steps");
  o = ct_profiler_defaults();
  o.activities = 0;
  assert_null(ct_profiler_start(&o));
  tu_assert_error_contains("no activity", "no activities");
}

// CUDA: each op's device time, and its kernel on the device's timeline.
static void test_device_time(void **state) {
  (void)state;
  if (tu_device.type != CT_CUDA) skip();
  ct_tensor *a = ct_randn(CT_SHAPE(512, 512), CT_F32, tu_device);
  TU_CHECK(a);
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  ct_record_function_begin("mm");
  ct_tensor *c = ct_matmul(a, a);
  TU_CHECK(c);
  TU_OK(ct_record_function_end());
  TU_OK(ct_profiler_stop(p));
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  int gemm = find(ev, n, "ct::gemm", 0), mm = find(ev, n, "mm", 0), kernel = -1;
  assert_true(gemm >= 0 && mm >= 0);
  for (int i = 0; i < n; ++i)
    if (ev[i].kind == CT_EVENT_KERNEL && ev[i].correlation == gemm) kernel = i;
  assert_true(kernel >= 0);
  assert_true(ev[gemm].device_us > 0);
  assert_true(ev[kernel].dur_us == ev[gemm].device_us);
  assert_true(ev[mm].device_total_us >= ev[gemm].device_us);
  // the kernel cannot start (much) before its launch: the clocks agree to
  // within the origin's uncertainty, a few tens of microseconds
  assert_true(ev[kernel].ts_us >= ev[gemm].ts_us - 50);
  ct_free(c);
  ct_free(a);
  ct_profiler_free(p);
}

// The device-time path without a GPU: with the testing aid, CPU ops get
// host-clock event pairs, which must come out as one kernel per op, inside
// its op's range, correlated with it, and summed up the tree and the table.
static void test_device_time_path_on_cpu(void **state) {
  (void)state;
  if (tu_device.type != CT_CPU) skip();
  ct_module *m = small_cnn();
  ct_optimizer *opt = adam_for(m);
  batch b = make_batch(8);
  cti_prof_time_cpu_ops_(true);
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  ct_record_function_begin("step");
  train_step(m, opt, b);
  TU_OK(ct_record_function_end());
  TU_OK(ct_profiler_stop(p));
  cti_prof_time_cpu_ops_(false);
  int n = 0, kernels = 0, ops = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  double kernel_sum = 0;
  for (int i = 0; i < n; ++i) {
    ops += ev[i].kind == CT_EVENT_OP;
    if (ev[i].kind != CT_EVENT_KERNEL) continue;
    kernels++;
    const ct_profiler_event *op = &ev[ev[i].correlation];
    assert_int_equal(op->kind, CT_EVENT_OP);
    assert_string_equal(op->name, ev[i].name);
    assert_true(ev[i].dur_us >= 0 && ev[i].dur_us == op->device_us);
    // recorded inside the op's range, on the same clock: to within the
    // origin's reading (a clock call) and elapsed times kept as float ms
    assert_true(ev[i].ts_us >= op->ts_us - 1.0);
    assert_true(ev[i].ts_us + ev[i].dur_us <= op->ts_us + op->dur_us + 1.0);
    kernel_sum += ev[i].dur_us;
  }
  assert_int_equal(kernels, ops);
  int step = find(ev, n, "step", 0);
  assert_true(fabs(ev[step].device_total_us - kernel_sum) <= 1e-6 * kernel_sum + 1e-6);
  ct_profiler_averages *a = ct_profiler_key_averages(p, false);
  TU_CHECK(a);
  assert_true(a->has_device);
  assert_true(fabs(a->self_device_total_us - kernel_sum) <= 1e-6 * kernel_sum + 1e-6);
  char *table = ct_profiler_table(a, "self_cuda_time_total", 0);
  TU_CHECK(table);
  assert_non_null(strstr(table, "Self CUDA time total: "));
  free(table);
  ct_profiler_averages_free(a);
  ct_profiler_free(p);
  free_batch(b);
  ct_optimizer_free(opt);
  ct_module_free(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_step_events_nest),    cmocka_unit_test(test_key_averages_add_up),
      cmocka_unit_test(test_memory_balances),     cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_threads_get_own_tracks), cmocka_unit_test(test_off_and_misuse),
      cmocka_unit_test(test_device_time),         cmocka_unit_test(test_device_time_path_on_cpu),
      cmocka_unit_test(test_data_parallel_replicas_get_tracks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
