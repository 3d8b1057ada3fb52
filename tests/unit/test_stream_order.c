// SPDX-License-Identifier: MIT
//
// test_stream_order: what chapter 12 claims of streams and events, on the
// device under test.
//
// Invariants checked: work on one stream runs in issue order (a chain of
// in-place ops whose result depends on the order, queued behind a slow host
// function on CUDA so that all of it is pending at once); ct_stream_wait_event
// and ct_stream_wait_stream order work across streams (the waiting stream
// reads what the other wrote last); events timestamp in order along a
// stream; ct_event_elapsed_time's rules and errors are PyTorch's (timing
// first, then recorded; a reversed pair gives the negative time); stream
// priorities follow torch.cuda.Stream.priority_range (checked against the
// CUDA driver's own range and cudaStreamGetPriority on a GPU).
#define _POSIX_C_SOURCE 200809L // nanosleep

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

#ifdef CT_HAVE_CUDA
static void CUDART_CB slow_fn(void *p) { sleep_ms(*(int *)p); }
#endif

// Holds stream s busy for ms milliseconds (CUDA: a host function in stream
// order; the CPU: nothing to hold, its work runs when issued).
static void hold_stream(ct_stream *s, int *ms) {
#ifdef CT_HAVE_CUDA
  if (ct_stream_device(s).type == CT_CUDA) {
    cudaError_t e = cudaLaunchHostFunc((cudaStream_t)ct_stream_handle(s), slow_fn, ms);
    if (e != cudaSuccess) fail_msg("cudaLaunchHostFunc: %s", cudaGetErrorString(e));
  }
#else
  (void)s;
  (void)ms;
#endif
}

static double value_of(const ct_tensor *t) {
  double v = NAN;
  TU_OK(ct_item(t, &v));
  return v;
}

// x := 1; x *= 2; x += 3 on one stream gives 5 (the other order gives 8),
// and events recorded between the ops read non-decreasing times.
static void test_one_stream_runs_in_order(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_stream *s = ct_stream_create(d, 0);
  TU_CHECK(s);
  ct_event *ev[4];
  for (int i = 0; i < 4; ++i) TU_CHECK(ev[i] = ct_event_create(d, true));
  ct_tensor *x = ct_empty(CT_SHAPE(1 << 16), CT_F32, d); // made on the default stream
  TU_CHECK(x);
  ct_stream *def = ct_current_stream(d);
  TU_OK(ct_stream_wait_stream(s, def));
  TU_OK(ct_set_stream(s));
  int ms = 100;
  hold_stream(s, &ms); // everything below is queued before any of it runs
  TU_OK(ct_event_record(ev[0], s));
  TU_OK(ct_fill_(x, 1.0));
  TU_OK(ct_event_record(ev[1], s));
  TU_OK(ct_binary_scalar_out(CT_OP_MUL, x, x, 2.0));
  TU_OK(ct_event_record(ev[2], s));
  TU_OK(ct_binary_scalar_out(CT_OP_ADD, x, x, 3.0));
  TU_OK(ct_event_record(ev[3], s));
  if (d.type == CT_CUDA) assert_false(ct_event_query(ev[3])); // still queued
  TU_OK(ct_stream_synchronize(s));
  ct_tensor *mx = ct_max(x), *sum = ct_sum(x); // max 5 and sum 5n: every element is 5
  TU_CHECK(mx);
  TU_CHECK(sum);
  assert_true(value_of(mx) == 5.0 && value_of(sum) == 5.0 * (1 << 16));
  float prev = 0;
  for (int i = 1; i < 4; ++i) {
    float t = -1;
    TU_OK(ct_event_elapsed_time(ev[0], ev[i], &t));
    assert_true(t >= prev);
    prev = t;
  }
  TU_OK(ct_set_stream(def));
  TU_OK(ct_record_stream(x, s));
  ct_free(sum), ct_free(mx), ct_free(x);
  for (int i = 0; i < 4; ++i) ct_event_free(ev[i]);
  ct_stream_free(s);
}

// Stream b reads x after waiting for the event a recorded after writing it:
// b sees a's last value, although a was held busy when b's work was queued.
// The same through ct_stream_wait_stream.
static void test_wait_orders_across_streams(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_stream *def = ct_current_stream(d);
  ct_stream *a = ct_stream_create(d, 0), *b = ct_stream_create(d, 0);
  ct_event *e = ct_event_create(d, false);
  TU_CHECK(a);
  TU_CHECK(b);
  TU_CHECK(e);
  for (int how = 0; how < 2; ++how) {
    ct_tensor *x = ct_zeros(CT_SHAPE(1 << 16), CT_F32, d);
    TU_CHECK(x);
    TU_OK(ct_stream_wait_stream(a, def)); // x was made on def
    TU_OK(ct_set_stream(a));
    int ms = 100;
    hold_stream(a, &ms);
    TU_OK(ct_fill_(x, 7.0 + how));
    if (how == 0) {
      TU_OK(ct_event_record(e, a));
      TU_OK(ct_stream_wait_event(b, e));
    } else {
      TU_OK(ct_stream_wait_stream(b, a));
    }
    TU_OK(ct_set_stream(b));
    ct_tensor *y = ct_mul_scalar(x, 2.0); // on b
    TU_CHECK(y);
    ct_tensor *neg = ct_neg(y);
    ct_tensor *lo = neg ? ct_max(neg) : NULL; // -min(y)
    TU_CHECK(lo);
    TU_OK(ct_stream_synchronize(b));
    TU_OK(ct_set_stream(def));
    TU_OK(ct_stream_wait_stream(def, b));
    assert_true(-value_of(lo) == 2.0 * (7.0 + how));
    TU_OK(ct_record_stream(x, a));
    TU_OK(ct_record_stream(x, b));
    TU_OK(ct_record_stream(y, b));
    TU_OK(ct_record_stream(lo, b));
    TU_OK(ct_record_stream(neg, b));
    ct_free(lo), ct_free(neg), ct_free(y), ct_free(x);
  }
  ct_event_free(e);
  ct_stream_free(a);
  ct_stream_free(b);
}

// torch.cuda.Event.elapsed_time: timing is checked before recording, in
// PyTorch's words; a reversed pair gives the negative interval.
static void test_elapsed_time_rules(void **state) {
  (void)state;
  ct_device d = tu_device;
  ct_event *t0 = ct_event_create(d, true), *t1 = ct_event_create(d, true);
  ct_event *plain = ct_event_create(d, false);
  TU_CHECK(t0);
  TU_CHECK(t1);
  TU_CHECK(plain);
  float ms = 123;
  // Neither recorded and one without timing: the timing error comes first.
  assert_int_equal(ct_event_elapsed_time(t0, plain, &ms), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Both events must be created with argument 'enable_timing=True'."));
  assert_int_equal(ct_event_elapsed_time(plain, t0, &ms), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "enable_timing=True"));
  // Timing on both, one recorded.
  TU_OK(ct_event_record(t0, NULL));
  assert_int_equal(ct_event_elapsed_time(t0, t1, &ms), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Both events must be recorded before calculating elapsed time."));
  assert_int_equal(ct_event_elapsed_time(t1, t0, &ms), CT_ERR_VALUE);
  assert_true(ms == 123); // untouched by a failure
  // Recorded, with something between them.
  sleep_ms(20);
  int hold = 20;
  hold_stream(ct_current_stream(d), &hold);
  TU_OK(ct_event_record(t1, NULL));
  float fwd = -1, back = 1;
  TU_OK(ct_event_elapsed_time(t0, t1, &fwd));
  TU_OK(ct_event_elapsed_time(t1, t0, &back));
  assert_true(fwd >= 19.0f);
  assert_true(fabsf(fwd + back) <= 0.01f + 1e-3f * fwd); // reversed = negative
  // The same event at both ends: zero.
  float zero = 1;
  TU_OK(ct_event_elapsed_time(t1, t1, &zero));
  assert_true(zero == 0.0f);
  // Recorded without timing: still the timing error.
  TU_OK(ct_event_record(plain, NULL));
  assert_int_equal(ct_event_elapsed_time(t0, plain, &ms), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "enable_timing=True"));
  ct_event_free(t0), ct_event_free(t1), ct_event_free(plain);
}

// torch.cuda.Stream.priority_range() and Stream.priority.
static void test_priority_range(void **state) {
  (void)state;
  ct_device d = tu_device;
  int least = 99, greatest = 99;
  TU_OK(ct_stream_priority_range(d, &least, &greatest));
  if (d.type == CT_CPU) {
    assert_int_equal(least, 0);
    assert_int_equal(greatest, 0);
    if (!ct_cuda_is_available()) {
      assert_int_equal(ct_cuda_stream_priority_range(&least, &greatest), CT_ERR_UNAVAILABLE);
      assert_non_null(strstr(ct_last_error(), "ct_cuda_stream_priority_range"));
    }
  } else {
#ifdef CT_HAVE_CUDA
    int lo = 0, hi = 0;
    assert_int_equal(cudaDeviceGetStreamPriorityRange(&lo, &hi), cudaSuccess);
    print_message("CUDA's range (%d, %d); PyTorch's (%d, %d)\n", lo, hi, least, greatest);
    assert_int_equal(least, lo);
    assert_int_equal(least, 0);
    assert_int_equal(greatest, hi > -3 ? hi : -3); // c10: at most 4 levels
    int cl = 99, cg = 99;
    TU_OK(ct_cuda_stream_priority_range(&cl, &cg));
    assert_int_equal(cl, least);
    assert_int_equal(cg, greatest);
#endif
  }
  assert_int_equal(ct_stream_priority_range(d, NULL, &greatest), CT_ERR_VALUE);
  // Asked-for priorities land inside the range, clamped at both ends.
  const int asked[] = {0, -1, greatest, greatest - 10, least + 10};
  for (int i = 0; i < 5; ++i) {
    ct_stream *s = ct_stream_create(d, asked[i]);
    TU_CHECK(s);
    int want = asked[i] > least ? least : asked[i] < greatest ? greatest : asked[i];
    assert_int_equal(ct_stream_priority(s), want);
#ifdef CT_HAVE_CUDA
    if (d.type == CT_CUDA) {
      int got = 99;
      assert_int_equal(cudaStreamGetPriority((cudaStream_t)ct_stream_handle(s), &got), cudaSuccess);
      assert_int_equal(got, want);
    }
#endif
    ct_stream_free(s);
  }
  assert_int_equal(ct_stream_priority(ct_default_stream(d)), 0);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_stream_runs_in_order),
      cmocka_unit_test(test_wait_orders_across_streams),
      cmocka_unit_test(test_elapsed_time_rules),
      cmocka_unit_test(test_priority_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
