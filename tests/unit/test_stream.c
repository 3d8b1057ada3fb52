// SPDX-License-Identifier: MIT
//
// test_stream: streams and events on the device under test.
//
// Invariant checked: events measure time that really passed (a known host
// sleep, or on CUDA a known host function run inside the stream), waits
// really order work (a host function queued behind a wait sees what the
// awaited work did), the current stream is per thread, and misuse fails with
// the documented status instead of crashing.
#define _POSIX_C_SOURCE 200809L // nanosleep

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

#ifdef CT_HAVE_CUDA
// A host function run in stream order: it sleeps, then raises a flag. Work
// queued after it on its stream (or on a stream that waits for it) starts
// only when it returns.
typedef struct slow_job {
  int ms;
  atomic_int done;
  atomic_int seen; // what a later host function observed of `done`
} slow_job;

static void CUDART_CB slow_fn(void *p) {
  slow_job *j = (slow_job *)p;
  sleep_ms(j->ms);
  atomic_store(&j->done, 1);
}
static void CUDART_CB observe_fn(void *p) {
  slow_job *j = (slow_job *)p;
  atomic_store(&j->seen, atomic_load(&j->done));
}

static void launch_host(ct_stream *s, cudaHostFn_t fn, void *arg) {
  cudaError_t e = cudaLaunchHostFunc((cudaStream_t)ct_stream_handle(s), fn, arg);
  if (e != cudaSuccess) fail_msg("cudaLaunchHostFunc: %s", cudaGetErrorString(e));
}
#endif

static void test_default_and_current(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_stream *def = ct_default_stream(d);
  TU_CHECK(def);
  assert_true(ct_device_eq(ct_stream_device(def), d));
  assert_ptr_equal(ct_current_stream(d), def);
  assert_ptr_equal(ct_default_stream(d), def); // one object per device
  assert_null(ct_stream_handle(def));           // CPU, or CUDA's legacy stream
  assert_true(ct_stream_query(def));
  TU_OK(ct_stream_synchronize(def));
  if (!ct_cuda_is_available()) {
    assert_null(ct_default_stream(ct_device_cuda(0)));
    assert_int_equal(ct_last_status(), CT_ERR_UNAVAILABLE);
    assert_null(ct_stream_create(ct_device_cuda(0), 0));
    assert_null(ct_event_create(ct_device_cuda(0), true));
  } else {
    assert_null(ct_default_stream(ct_device_cuda(ct_cuda_device_count())));
    assert_int_equal(ct_last_status(), CT_ERR_DEVICE);
  }
}

static void *read_current(void *arg) {
  ct_stream **out = (ct_stream **)arg;
  *out = ct_current_stream(tu_device);
  return NULL;
}

static void test_create_set_destroy(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_stream *def = ct_default_stream(d);
  ct_stream *s = ct_stream_create(d, 0);
  TU_CHECK(s);
  assert_ptr_not_equal(s, def);
  assert_true(ct_device_eq(ct_stream_device(s), d));
  if (d.type == CT_CUDA)
    assert_non_null(ct_stream_handle(s));
  else
    assert_null(ct_stream_handle(s));

  TU_OK(ct_set_stream(s));
  assert_ptr_equal(ct_current_stream(d), s);
  // Another thread still sees the default stream: the current one is per thread.
  pthread_t th;
  ct_stream *other = NULL;
  assert_int_equal(pthread_create(&th, NULL, read_current, &other), 0);
  pthread_join(th, NULL);
  assert_ptr_equal(other, def);

  TU_OK(ct_set_stream(def));
  assert_ptr_equal(ct_current_stream(d), def);
  TU_OK(ct_set_stream(s));
  ct_stream_free(s); // current in this thread: the default takes over
  assert_ptr_equal(ct_current_stream(d), def);

  ct_stream_free(def); // ignored
  assert_ptr_equal(ct_default_stream(d), def);
  assert_true(ct_stream_query(def));
  ct_stream_free(NULL);

  assert_int_equal(ct_set_stream(NULL), CT_ERR_VALUE);
  assert_int_equal(ct_stream_synchronize(NULL), CT_ERR_VALUE);

  // Priorities outside the device's range are clamped, not refused.
  int prios[] = {-1, -100, 100};
  for (int i = 0; i < 3; ++i) {
    ct_stream *p = ct_stream_create(d, prios[i]);
    TU_CHECK(p);
    TU_OK(ct_stream_synchronize(p));
    ct_stream_free(p);
  }
}

static void test_elapsed_time_of_sleep(void **state) {
  (void)state;
  const int sleep = 30; // ms
  ct_device d = tu_device;
  ct_stream *s = ct_stream_create(d, 0);
  TU_CHECK(s);
  ct_event *start = ct_event_create(d, true), *end = ct_event_create(d, true);
  TU_CHECK(start);
  TU_CHECK(end);
  float ms = -1;
  if (d.type == CT_CPU) {
    TU_OK(ct_event_record(start, s));
    sleep_ms(sleep);
    TU_OK(ct_event_record(end, NULL)); // the current stream works too
    TU_OK(ct_event_synchronize(end));
    assert_true(ct_event_query(end));
    TU_OK(ct_event_elapsed_time(start, end, &ms));
    print_message("cpu events around a %d ms sleep: %.3f ms\n", sleep, ms);
    assert_true(ms >= (float)sleep);
  } else {
#ifdef CT_HAVE_CUDA
    slow_job job = {.ms = sleep};
    TU_OK(ct_event_record(start, s));
    launch_host(s, slow_fn, &job); // the stream is busy for `sleep` ms
    TU_OK(ct_event_record(end, s));
    TU_OK(ct_event_elapsed_time(start, end, &ms)); // waits for `end`
    print_message("cuda events around a %d ms host function: %.3f ms\n", sleep, ms);
    // GPU timestamps come from another clock: allow it 1% of skew.
    assert_true(ms >= 0.99f * (float)sleep);
#endif
  }
  assert_true(ms < 10000.0f);
  // A second interval with no sleep is shorter than the slept one.
  float ms2 = -1;
  TU_OK(ct_event_record(start, s));
  TU_OK(ct_event_record(end, s));
  TU_OK(ct_event_elapsed_time(start, end, &ms2));
  assert_true(ms2 >= 0.0f && ms2 < ms);
  ct_event_free(start);
  ct_event_free(end);
  ct_stream_free(s);
}

static void test_event_errors(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_event *a = ct_event_create(d, true), *b = ct_event_create(d, true);
  ct_event *nt = ct_event_create(d, false);
  TU_CHECK(a);
  TU_CHECK(b);
  TU_CHECK(nt);
  float ms;
  // Not recorded yet.
  assert_int_equal(ct_event_elapsed_time(a, b, &ms), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "recorded"));
  TU_OK(ct_event_record(a, NULL));
  TU_OK(ct_event_record(b, NULL));
  TU_OK(ct_event_record(nt, NULL));
  TU_OK(ct_event_elapsed_time(a, b, &ms));
  // Without timing.
  assert_int_equal(ct_event_elapsed_time(a, nt, &ms), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "enable_timing"));
  assert_int_equal(ct_event_elapsed_time(NULL, b, &ms), CT_ERR_VALUE);
  assert_int_equal(ct_event_elapsed_time(a, b, NULL), CT_ERR_VALUE);
  assert_int_equal(ct_event_record(NULL, NULL), CT_ERR_VALUE);
  assert_int_equal(ct_event_synchronize(NULL), CT_ERR_VALUE);
  assert_int_equal(ct_stream_wait_event(NULL, a), CT_ERR_VALUE);
  TU_OK(ct_event_synchronize(nt));
  assert_true(ct_event_query(nt));

  if (ct_cuda_is_available()) {
    // Across devices: a CPU and a CUDA event cannot be compared, and an
    // event is recorded only on a stream of its own device.
    ct_device other = d.type == CT_CPU ? ct_device_cuda(0) : ct_device_cpu();
    ct_event *o = ct_event_create(other, true);
    TU_CHECK(o);
    TU_OK(ct_event_record(o, NULL));
    assert_int_equal(ct_event_elapsed_time(a, o, &ms), CT_ERR_DEVICE);
    assert_non_null(strstr(ct_last_error(), "same device"));
    assert_int_equal(ct_event_record(o, ct_default_stream(d)), CT_ERR_DEVICE);
    ct_event_free(o);
  }
  ct_event_free(a);
  ct_event_free(b);
  ct_event_free(nt);
  ct_event_free(NULL);
}

// s waits for e: work queued on s after the wait runs after e's work.
static void test_wait_event_orders(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_stream *a = ct_stream_create(d, 0), *b = ct_stream_create(d, 0);
  TU_CHECK(a);
  TU_CHECK(b);
  ct_event *e = ct_event_create(d, false);
  TU_CHECK(e);
  TU_OK(ct_stream_wait_event(b, e)); // never recorded: nothing to wait for
  if (d.type == CT_CPU) {
    TU_OK(ct_event_record(e, a));
    assert_true(ct_event_query(e)); // CPU work is done when issued
    TU_OK(ct_stream_wait_event(b, e));
    TU_OK(ct_stream_wait_stream(b, a));
    assert_true(ct_stream_query(b));
  } else {
#ifdef CT_HAVE_CUDA
    slow_job job = {.ms = 100};
    launch_host(a, slow_fn, &job);
    TU_OK(ct_event_record(e, a));
    TU_OK(ct_stream_wait_event(b, e));
    launch_host(b, observe_fn, &job);
    TU_OK(ct_stream_synchronize(b));
    assert_int_equal(atomic_load(&job.seen), 1);

    slow_job job2 = {.ms = 100};
    launch_host(a, slow_fn, &job2);
    TU_OK(ct_stream_wait_stream(b, a));
    launch_host(b, observe_fn, &job2);
    TU_OK(ct_stream_synchronize(b));
    assert_int_equal(atomic_load(&job2.seen), 1);
#endif
  }
#ifdef CT_HAVE_CUDA
  if (ct_cuda_is_available()) {
    // The CPU stream waiting on a CUDA event blocks the host until it is done.
    ct_device g = d.type == CT_CUDA ? d : ct_device_cuda(0);
    ct_stream *gs = ct_stream_create(g, 0);
    ct_event *ge = ct_event_create(g, false);
    TU_CHECK(gs);
    TU_CHECK(ge);
    slow_job job = {.ms = 100};
    launch_host(gs, slow_fn, &job);
    TU_OK(ct_event_record(ge, gs));
    TU_OK(ct_stream_wait_event(ct_default_stream(ct_device_cpu()), ge));
    assert_int_equal(atomic_load(&job.done), 1);
    assert_true(ct_event_query(ge));
    // And a CUDA stream waiting on a CPU event does not wait at all.
    ct_event *ce = ct_event_create(ct_device_cpu(), false);
    TU_CHECK(ce);
    TU_OK(ct_event_record(ce, NULL));
    TU_OK(ct_stream_wait_event(gs, ce));
    ct_event_free(ce);
    ct_event_free(ge);
    ct_stream_free(gs);
  }
#endif
  ct_event_free(e);
  ct_stream_free(a);
  ct_stream_free(b);
}

static void test_query(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_stream *s = ct_stream_create(d, 0);
  ct_event *e = ct_event_create(d, false);
  TU_CHECK(s);
  TU_CHECK(e);
  assert_true(ct_stream_query(s));
  assert_true(ct_event_query(e)); // unrecorded: nothing pending
  if (d.type == CT_CUDA) {
#ifdef CT_HAVE_CUDA
    slow_job job = {.ms = 200};
    launch_host(s, slow_fn, &job);
    TU_OK(ct_event_record(e, s));
    assert_false(ct_stream_query(s));
    assert_false(ct_event_query(e));
    TU_OK(ct_event_synchronize(e));
    assert_true(ct_event_query(e));
    assert_int_equal(atomic_load(&job.done), 1);
    TU_OK(ct_stream_synchronize(s));
    assert_true(ct_stream_query(s));
    // "Not ready" was not left behind as an error for the next CUDA call.
    assert_int_equal(cudaGetLastError(), cudaSuccess);
#endif
  } else {
    TU_OK(ct_event_record(e, s));
    assert_true(ct_event_query(e));
    assert_true(ct_stream_query(s));
  }
  ct_event_free(e);
  ct_stream_free(s);
}

// The CPU model's test hold (stream.h): a CPU event recorded while held is
// not done for ct_event_query until the hold ends; one recorded before or
// after is done at once. (CPU events, whatever the device under test.)
static void test_cpu_event_hold(void **state) {
  (void)state;
  ct_device cpu = ct_device_cpu();
  ct_event *before = ct_event_create(cpu, false), *during = ct_event_create(cpu, false),
           *after = ct_event_create(cpu, false);
  TU_CHECK(before);
  TU_CHECK(during);
  TU_CHECK(after);
  TU_OK(ct_event_record(before, NULL));
  ct_cpu_events_hold(true);
  TU_OK(ct_event_record(during, NULL));
  assert_true(ct_event_query(before));
  assert_false(ct_event_query(during));
  TU_OK(ct_event_synchronize(during)); // the host has nothing to wait for
  assert_false(ct_event_query(during));
  ct_cpu_events_hold(false);
  assert_true(ct_event_query(during));
  TU_OK(ct_event_record(after, NULL));
  assert_true(ct_event_query(after));
  // A second hold does not catch an event of the first.
  ct_cpu_events_hold(true);
  assert_true(ct_event_query(during));
  ct_cpu_events_hold(false);
  ct_event_free(before), ct_event_free(during), ct_event_free(after);
}

// A kernel's deferred error (async_error.h) is seen at a wait for the stream
// it ran on, here through an event of a side stream (CUDA only).
static void test_async_error_on_side_stream(void **state) {
  (void)state;
  if (tu_device.type == CT_CPU) skip();
  ct_stream *def = ct_current_stream(tu_device);
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_event *e = ct_event_create(tu_device, false);
  TU_CHECK(e);
  const int64_t bad[2] = {1, 12}; // 12 of 4 classes
  TU_OK(ct_set_stream(side));
  ct_tensor *x = ct_zeros(CT_SHAPE(2, 4), CT_F32, tu_device);
  ct_tensor *t = ct_from_host(bad, CT_SHAPE(2), CT_I64, tu_device);
  ct_tensor *loss = x && t ? ct_cross_entropy_loss(x, t, NULL) : NULL;
  int rc = loss ? ct_event_record(e, side) : (int)ct_last_status();
  TU_OK(ct_set_stream(def));
  TU_OK(rc);
  assert_int_equal(ct_event_synchronize(e), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Target 12 is out of bounds."));
  assert_non_null(strstr(ct_last_error(), "ct_event_synchronize"));
  TU_OK(ct_stream_synchronize(side)); // reported once
  ct_free(loss), ct_free(t), ct_free(x);
  ct_event_free(e);
  ct_stream_free(side);
}

// A CUDA failure the runtime handled (ct_cuda_fail) is not left in CUDA's
// last-error slot, where the next kernel launch's check would take it for
// its own (CUDA only).
static void test_handled_failure_not_blamed_on_next_kernel(void **state) {
  (void)state;
  if (tu_device.type == CT_CPU) skip();
#ifdef CT_HAVE_CUDA
  ct_tensor *a = ct_ones(CT_SHAPE(1000), CT_F32, tu_device);
  TU_CHECK(a);
  int prev = 0;
  assert_int_equal(cudaGetDevice(&prev), cudaSuccess);
  cudaError_t e = cudaSetDevice(-1); // fails, and CUDA records it as its last error
  assert_int_not_equal(e, cudaSuccess);
  assert_int_equal(ct_cuda_fail((int)e, "cudaSetDevice(-1)", __FILE__, __LINE__), CT_ERR_CUDA);
  assert_int_equal(cudaSetDevice(prev), cudaSuccess);
  ct_tensor *b = ct_add(a, a); // a kernel launch, checked with cudaGetLastError
  TU_CHECK(b);
  ct_tensor *sum = ct_sum(b);
  TU_CHECK(sum);
  double v = 0;
  TU_OK(ct_item(sum, &v));
  assert_true(v == 2000.0);
  ct_free(sum), ct_free(b), ct_free(a);
#endif
}

// Matrix products on two streams at once, each with its own cuBLAS
// workspace, agree with a float64 product on the host (exact here: small
// integers). A shared workspace could let one overwrite the other's
// scratch; whether cuBLAS uses it depends on its choice of algorithm, so
// this checks the results, not the race (CUDA only).
static void test_gemm_on_two_streams(void **state) {
  (void)state;
  if (tu_device.type == CT_CPU) skip();
  enum { N = 384, K = 2048 };
  float *ha = malloc(sizeof(float) * N * K), *hb = malloc(sizeof(float) * K * N);
  double *ref = malloc(sizeof(double) * N * N);
  float *back = malloc(sizeof(float) * N * N);
  assert_true(ha && hb && ref && back);
  for (int i = 0; i < N; ++i)
    for (int k = 0; k < K; ++k) ha[i * K + k] = (float)((i + 3 * k) % 7 - 3);
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) hb[k * N + j] = (float)((5 * k + j) % 5 - 2);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += (double)ha[i * K + k] * hb[k * N + j];
      ref[i * N + j] = acc;
    }
  ct_stream *def = ct_current_stream(tu_device);
  ct_stream *st[2] = {ct_stream_create(tu_device, 0), ct_stream_create(tu_device, 0)};
  TU_CHECK(st[0]);
  TU_CHECK(st[1]);
  ct_tensor *a = ct_from_host(ha, CT_SHAPE(N, K), CT_F32, tu_device);
  ct_tensor *b = ct_from_host(hb, CT_SHAPE(K, N), CT_F32, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  ct_tensor *c[2][4] = {{NULL}};
  for (int r = 0; r < 4; ++r)
    for (int q = 0; q < 2; ++q) {
      TU_OK(ct_set_stream(st[q]));
      TU_OK(ct_stream_wait_stream(st[q], def)); // a and b are made on def
      c[q][r] = ct_matmul(a, b);
      TU_OK(ct_set_stream(def));
      TU_CHECK(c[q][r]);
      TU_OK(ct_record_stream(a, st[q]));
      TU_OK(ct_record_stream(b, st[q]));
    }
  for (int q = 0; q < 2; ++q) {
    TU_OK(ct_stream_synchronize(st[q]));
    for (int r = 0; r < 4; ++r) {
      TU_OK(ct_set_stream(st[q]));
      TU_OK(ct_copy_to_host(c[q][r], back, sizeof(float) * N * N));
      TU_OK(ct_set_stream(def));
      for (int i = 0; i < N * N; ++i)
        if ((double)back[i] != ref[i])
          fail_msg("stream %d, product %d: element %d is %g, expected %g", q, r, i, back[i], ref[i]);
      ct_free(c[q][r]);
    }
  }
  ct_free(a), ct_free(b);
  ct_stream_free(st[0]), ct_stream_free(st[1]);
  free(ha), free(hb), free(ref), free(back);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_and_current),
      cmocka_unit_test(test_create_set_destroy),
      cmocka_unit_test(test_elapsed_time_of_sleep),
      cmocka_unit_test(test_event_errors),
      cmocka_unit_test(test_wait_event_orders),
      cmocka_unit_test(test_query),
      cmocka_unit_test(test_cpu_event_hold),
      cmocka_unit_test(test_async_error_on_side_stream),
      cmocka_unit_test(test_handled_failure_not_blamed_on_next_kernel),
      cmocka_unit_test(test_gemm_on_two_streams),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
