// SPDX-License-Identifier: MIT
//
// test_sync_debug: the sync debug mode (sync_debug.h) on the device under test.
//
// Invariant checked: each call of a fixed list either is a sync point or is
// not, as sync_debug.h's list says (PyTorch's list, plus the CPU model): in
// "warn" mode a sync point reports exactly once under its own name and
// finishes its work; a call that is not one reports nothing; in "error" mode
// a sync point fails with CT_ERR_SYNC before doing anything (outputs
// untouched, memory statistics unchanged) and the same call succeeds once the
// mode is "default" again. The expectations are written from the list, not
// from what the runtime did.
#define _POSIX_C_SOURCE 200809L // dup, dup2, fileno

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

typedef struct fixture {
  ct_device d;
  ct_tensor *x;      // (4,) f32 on d: 1, 2, 3, 4
  ct_tensor *one;    // x[0:1], a view
  ct_tensor *host;   // (4,) f32 pageable on the CPU
  ct_tensor *pinned; // (4,) f32 pinned (CUDA only, else NULL)
  ct_stream *side;
  ct_event *e0, *e1;
  double item;        // what ct_item wrote
  float buf[4];       // what ct_copy_to_host wrote
} fixture;

// One call of the list. Returns its status; a call that makes a tensor frees it.
typedef int (*probe_fn)(fixture *f);

static int free_ok(ct_tensor *t) {
  int rc = t ? CT_OK : (int)ct_last_status();
  ct_free(t);
  return rc;
}

static int p_item(fixture *f) { return ct_item(f->one, &f->item); }
static int p_item1(fixture *f) {
  ct_tensor *s = ct_sum(f->x);
  int rc = s ? ct_item(s, &f->item) : (int)ct_last_status();
  ct_free(s);
  return rc;
}
static int p_copy_to_host(fixture *f) { return ct_copy_to_host(f->x, f->buf, sizeof f->buf); }
static int p_from_host(fixture *f) {
  const float v[4] = {5, 6, 7, 8};
  return free_ok(ct_from_host(v, CT_SHAPE(4), CT_F32, f->d));
}
static int p_print(fixture *f) {
  FILE *null = fopen("/dev/null", "w");
  int rc = ct_print(null, f->x);
  fclose(null);
  return rc;
}
static int p_str(fixture *f) {
  char *s = ct_tensor_str(f->x);
  int rc = s ? CT_OK : (int)ct_last_status();
  free(s);
  return rc;
}
static int p_any_nonfinite(fixture *f) {
  bool any = true;
  int rc = ct_any_nonfinite(f->x, &any);
  return rc == CT_OK && any ? CT_ERR_VALUE : rc;
}
static int p_stream_sync(fixture *f) { return ct_stream_synchronize(f->side); }
static int p_to_cpu(fixture *f) { return free_ok(ct_to(f->x, ct_device_cpu(), CT_F32, false)); }
static int p_to_cpu_async(fixture *f) { return free_ok(ct_to(f->x, ct_device_cpu(), CT_F32, true)); }
static int p_to_dev(fixture *f) { return free_ok(ct_to(f->host, f->d, CT_F32, false)); }
static int p_to_dev_pageable_nb(fixture *f) { return free_ok(ct_to(f->host, f->d, CT_F32, true)); }
static int p_to_dev_pinned_nb(fixture *f) { return free_ok(ct_to(f->pinned, f->d, CT_F32, true)); }
static int p_copy_d2h(fixture *f) { return ct_copy_(f->host, f->x, false); }
static int p_copy_d2h_pinned_nb(fixture *f) { return ct_copy_(f->pinned, f->x, true); }
static int p_add(fixture *f) { return free_ok(ct_add(f->x, f->x)); }
static int p_matmul(fixture *f) {
  ct_tensor *m = ct_reshape(f->x, CT_SHAPE(2, 2));
  int rc = m ? free_ok(ct_matmul(m, m)) : (int)ct_last_status();
  ct_free(m);
  return rc;
}
static int p_sum(fixture *f) { return free_ok(ct_sum(f->x)); }
static int p_zeros(fixture *f) { return free_ok(ct_zeros(CT_SHAPE(8), CT_F32, f->d)); }
static int p_cast(fixture *f) { return free_ok(ct_to(f->x, f->d, CT_F64, false)); }
static int p_clone(fixture *f) { return free_ok(ct_clone(f->x)); }
static int p_record(fixture *f) { return ct_event_record(f->e0, f->side); }
static int p_wait_event(fixture *f) {
  int rc = ct_event_record(f->e0, f->side);
  return rc ? rc : ct_stream_wait_event(ct_current_stream(f->d), f->e0);
}
static int p_wait_stream(fixture *f) { return ct_stream_wait_stream(ct_current_stream(f->d), f->side); }
static int p_queries(fixture *f) {
  (void)ct_stream_query(f->side);
  (void)ct_event_query(f->e0);
  return CT_OK;
}
static int p_event_sync(fixture *f) {
  int rc = ct_event_record(f->e0, f->side);
  return rc ? rc : ct_event_synchronize(f->e0);
}
static int p_elapsed(fixture *f) {
  float ms = 0;
  int rc = ct_event_record(f->e0, f->side);
  if (!rc) rc = ct_event_record(f->e1, f->side);
  return rc ? rc : ct_event_elapsed_time(f->e0, f->e1, &ms);
}
static int p_device_sync(fixture *f) { return ct_cuda_synchronize(f->d.index); }

typedef enum { ANY, CUDA_ONLY } where;

typedef struct probe {
  const char *what;    // the call, for messages
  probe_fn run;
  const char *on_cpu;  // the name reported on the CPU, NULL = not a sync point there
  const char *on_cuda; // the same on CUDA
  where runs;          // CUDA_ONLY: needs pinned memory or a GPU
} probe;

// From sync_debug.h's list. On the CPU a same-device ct_to/ct_copy_ copies
// nothing to wait for, so it is not a sync point there.
static const probe probes[] = {
    {"ct_item", p_item, "ct_item", "ct_item", ANY},
    {"ct_item(ct_sum(x))", p_item1, "ct_item", "ct_item", ANY},
    {"ct_copy_to_host", p_copy_to_host, "ct_copy_to_host", "ct_copy_to_host", ANY},
    {"ct_from_host", p_from_host, "ct_from_host", "ct_from_host", ANY},
    {"ct_print", p_print, "ct_print", "ct_print", ANY},
    {"ct_tensor_str", p_str, "ct_tensor_str", "ct_tensor_str", ANY},
    {"ct_any_nonfinite", p_any_nonfinite, "ct_any_nonfinite", "ct_any_nonfinite", ANY},
    {"ct_stream_synchronize", p_stream_sync, "ct_stream_synchronize", "ct_stream_synchronize", ANY},
    {"ct_to(x, cpu)", p_to_cpu, NULL, "ct_to", ANY},
    {"ct_to(x, cpu, non_blocking)", p_to_cpu_async, NULL, NULL, ANY},
    {"ct_to(host, dev)", p_to_dev, NULL, "ct_to", ANY},
    {"ct_to(pageable host, dev, non_blocking)", p_to_dev_pageable_nb, NULL, "ct_to", ANY},
    {"ct_to(pinned host, dev, non_blocking)", p_to_dev_pinned_nb, NULL, NULL, CUDA_ONLY},
    {"ct_copy_(host, x)", p_copy_d2h, NULL, "ct_copy_", ANY},
    {"ct_copy_(pinned, x, non_blocking)", p_copy_d2h_pinned_nb, NULL, NULL, CUDA_ONLY},
    {"ct_add", p_add, NULL, NULL, ANY},
    {"ct_matmul", p_matmul, NULL, NULL, ANY},
    {"ct_sum", p_sum, NULL, NULL, ANY},
    {"ct_zeros", p_zeros, NULL, NULL, ANY},
    {"ct_to(x, dev, f64)", p_cast, NULL, NULL, ANY},
    {"ct_clone", p_clone, NULL, NULL, ANY},
    {"ct_event_record", p_record, NULL, NULL, ANY},
    {"ct_stream_wait_event", p_wait_event, NULL, NULL, ANY},
    {"ct_stream_wait_stream", p_wait_stream, NULL, NULL, ANY},
    {"ct_stream_query, ct_event_query", p_queries, NULL, NULL, ANY},
    {"ct_event_synchronize", p_event_sync, NULL, NULL, ANY},
    {"ct_event_elapsed_time", p_elapsed, NULL, NULL, ANY},
    {"ct_cuda_synchronize", p_device_sync, NULL, NULL, CUDA_ONLY},
};
enum { NPROBES = sizeof probes / sizeof probes[0] };

typedef struct log {
  int n;
  char op[8][48];
  ct_device dev[8];
  int mode[8];
} log;

static void hook(const char *op, ct_device d, int mode, void *ctx) {
  log *l = ctx;
  if (l->n < 8) {
    snprintf(l->op[l->n], sizeof l->op[0], "%s", op);
    l->dev[l->n] = d;
    l->mode[l->n] = mode;
  }
  l->n++;
}

static int setup(void **state) {
  static fixture f;
  memset(&f, 0, sizeof f);
  f.d = tu_device;
  const float v[4] = {1, 2, 3, 4};
  f.x = ct_from_host(v, CT_SHAPE(4), CT_F32, f.d);
  f.one = f.x ? ct_narrow(f.x, 0, 0, 1) : NULL;
  f.host = ct_from_host(v, CT_SHAPE(4), CT_F32, ct_device_cpu());
  f.pinned = f.d.type == CT_CUDA ? ct_pin_memory(f.host) : NULL;
  f.side = ct_stream_create(f.d, 0);
  f.e0 = ct_event_create(f.d, true);
  f.e1 = ct_event_create(f.d, true);
  if (!f.x || !f.one || !f.host || (f.d.type == CT_CUDA && !f.pinned) || !f.side || !f.e0 || !f.e1) return -1;
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  ct_set_sync_debug_hook(NULL, NULL);
  ct_set_sync_debug_mode(0);
  TU_OK(ct_cuda_is_available() && f->d.type == CT_CUDA ? ct_cuda_synchronize(f->d.index) : CT_OK);
  ct_free(f->x), ct_free(f->one), ct_free(f->host), ct_free(f->pinned);
  ct_event_free(f->e0), ct_event_free(f->e1);
  ct_stream_free(f->side);
  return 0;
}

static const char *expected(const probe *p, ct_device d) {
  return d.type == CT_CUDA ? p->on_cuda : p->on_cpu;
}

static bool runs_here(const probe *p, ct_device d) { return p->runs == ANY || d.type == CT_CUDA; }

// "warn": each sync point reports once, under its name and device, and does
// its work; every other call reports nothing.
static void test_warn_reports_exactly_the_sync_points(void **state) {
  fixture *f = *state;
  log l;
  ct_set_sync_debug_hook(hook, &l);
  TU_OK(ct_set_sync_debug_mode(CT_SYNC_DEBUG_WARN));
  int nsync = 0;
  for (int i = 0; i < NPROBES; ++i) {
    const probe *p = &probes[i];
    if (!runs_here(p, f->d)) continue;
    memset(&l, 0, sizeof l);
    uint64_t before = ct_sync_debug_reports();
    int rc = p->run(f);
    if (rc != CT_OK) fail_msg("%s failed in warn mode: %s", p->what, ct_last_error());
    const char *want = expected(p, f->d);
    if (want) {
      ++nsync;
      if (l.n != 1) fail_msg("%s: expected 1 report (%s), got %d", p->what, want, l.n);
      if (strcmp(l.op[0], want) != 0) fail_msg("%s: reported as %s, expected %s", p->what, l.op[0], want);
      assert_int_equal(l.mode[0], CT_SYNC_DEBUG_WARN);
      ct_device gpu = f->d;
      assert_true(ct_device_eq(l.dev[0], gpu));
      assert_true(ct_sync_debug_reports() == before + 1);
    } else if (l.n != 0) {
      fail_msg("%s is not a sync point, yet it reported %d time(s), first as %s", p->what, l.n, l.op[0]);
    }
  }
  // The values the sync points fetched are right: they did their work.
  assert_true(f->item == 10.0); // ct_item(ct_sum(x)) ran after ct_item(x)
  for (int i = 0; i < 4; ++i) assert_true(f->buf[i] == (float)(i + 1));
  print_message("%d of the calls are sync points on %s\n", nsync, f->d.type == CT_CUDA ? "cuda" : "cpu");
  assert_true(nsync >= 8);
  TU_OK(ct_set_sync_debug_mode(0));
  ct_set_sync_debug_hook(NULL, NULL);
}

// "error": each sync point fails with CT_ERR_SYNC, changes nothing, and works
// again in "default"; every other call succeeds.
static void test_error_fails_sync_points_and_leaves_runtime_usable(void **state) {
  fixture *f = *state;
  log l;
  ct_set_sync_debug_hook(hook, &l);
  for (int i = 0; i < NPROBES; ++i) {
    const probe *p = &probes[i];
    if (!runs_here(p, f->d)) continue;
    memset(&l, 0, sizeof l);
    f->item = -1;
    memset(f->buf, 0, sizeof f->buf);
    TU_OK(ct_cuda_is_available() && f->d.type == CT_CUDA ? ct_cuda_synchronize(f->d.index) : CT_OK);
    size_t allocated = ct_memory_allocated(f->d);
    TU_OK(ct_set_sync_debug_mode(CT_SYNC_DEBUG_ERROR));
    int rc = p->run(f);
    TU_OK(ct_set_sync_debug_mode(CT_SYNC_DEBUG_DEFAULT));
    const char *want = expected(p, f->d);
    if (!want) {
      if (rc != CT_OK) fail_msg("%s is not a sync point, yet it failed in error mode: %s", p->what, ct_last_error());
      assert_int_equal(l.n, 0);
      continue;
    }
    if (rc != CT_ERR_SYNC) fail_msg("%s: expected CT_ERR_SYNC in error mode, got %d (%s)", p->what, rc, ct_last_error());
    assert_int_equal(l.n, 1);
    assert_int_equal(l.mode[0], CT_SYNC_DEBUG_ERROR);
    assert_non_null(strstr(ct_last_error(), want));
    assert_non_null(strstr(ct_last_error(), "called a synchronizing"));
    assert_non_null(strstr(ct_last_error(), "\"error\""));
    // Nothing was done: no value written, no memory kept.
    assert_true(f->item == -1);
    for (int k = 0; k < 4; ++k) assert_true(f->buf[k] == 0.0f);
    assert_true(ct_memory_allocated(f->d) == allocated);
    // And the runtime is usable: the same call now succeeds.
    memset(&l, 0, sizeof l);
    if (p->run(f) != CT_OK) fail_msg("%s failed after error mode was left: %s", p->what, ct_last_error());
    assert_int_equal(l.n, 0);
  }
  double v = 0;
  TU_OK(ct_item(f->one, &v));
  assert_true(v == 1.0);
  ct_set_sync_debug_hook(NULL, NULL);
}

// The mode's values and names, as torch.cuda.set_sync_debug_mode takes them.
static void test_mode_values(void **state) {
  (void)state;
  assert_int_equal(ct_get_sync_debug_mode(), 0);
  const char *names[] = {"default", "warn", "error"};
  for (int m = 0; m < 3; ++m) {
    TU_OK(ct_set_sync_debug_mode_str(names[m]));
    assert_int_equal(ct_get_sync_debug_mode(), m);
    assert_string_equal(ct_sync_debug_mode_name(m), names[m]);
    TU_OK(ct_set_sync_debug_mode(0));
    char digit[2] = {(char)('0' + m), 0};
    TU_OK(ct_set_sync_debug_mode_str(digit));
    assert_int_equal(ct_get_sync_debug_mode(), m);
  }
  TU_OK(ct_set_sync_debug_mode(1));
  assert_int_equal(ct_set_sync_debug_mode(3), CT_ERR_VALUE);
  assert_int_equal(ct_set_sync_debug_mode(-1), CT_ERR_VALUE);
  assert_int_equal(ct_set_sync_debug_mode_str("loud"), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "expected one of `default`, `warn`, `error`"));
  assert_int_equal(ct_set_sync_debug_mode_str(NULL), CT_ERR_VALUE);
  assert_int_equal(ct_get_sync_debug_mode(), 1); // unchanged by the bad values
  TU_OK(ct_set_sync_debug_mode(0));
}

// Without a hook, "warn" prints one line on stderr naming the call.
static void test_default_warning_text(void **state) {
  fixture *f = *state;
  fflush(stderr);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  int saved = dup(fileno(stderr));
  assert_true(saved >= 0);
  assert_true(dup2(fileno(tmp), fileno(stderr)) >= 0);
  TU_OK(ct_set_sync_debug_mode(CT_SYNC_DEBUG_WARN));
  double v = 0;
  int rc = ct_item(f->one, &v);
  TU_OK(ct_set_sync_debug_mode(0));
  fflush(stderr);
  dup2(saved, fileno(stderr));
  close(saved);
  TU_OK(rc);
  char text[512] = {0};
  rewind(tmp);
  size_t n = fread(text, 1, sizeof text - 1, tmp);
  fclose(tmp);
  assert_true(n > 0);
  assert_non_null(strstr(text, "warning: ct_item: called a synchronizing"));
  assert_non_null(strstr(text, f->d.type == CT_CUDA ? "CUDA operation [cuda:" : "[cpu]"));
  assert_null(strchr(strchr(text, '\n') + 1, '\n')); // one line
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mode_values),
      cmocka_unit_test(test_warn_reports_exactly_the_sync_points),
      cmocka_unit_test(test_error_fails_sync_points_and_leaves_runtime_usable),
      cmocka_unit_test(test_default_warning_text),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
