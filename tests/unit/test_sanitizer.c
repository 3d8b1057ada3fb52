// SPDX-License-Identifier: MIT
//
// test_sanitizer: the stream-ordering sanitizer (sanitizer.h) on the device
// under test.
//
// Invariant checked: a read on stream B of a tensor last written on stream A
// is reported, naming both streams, the tensor and the writing op, exactly
// when nothing orders them, and is silent when a wait orders them, whichever
// wait it is (ct_stream_wait_stream, an event, a host synchronize, a
// blocking copy to the host). The same for a write after an unordered read,
// for use before the allocation's stream is waited for (alloc.h rule 1) and
// for a free without ct_record_stream (rule 2). "error" mode fails the op
// before it runs (no output, the input untouched) and leaves the runtime
// usable; "warn" reports and goes on; "off" reports nothing. The same code
// runs on the CPU, where nothing really races: the model is what is tested.
#include <string.h>

#include "testutil.h"

typedef struct two {
  ct_device d;
  ct_stream *def, *a, *b;
} two;

static int setup(void **state) {
  static two t;
  t.d = tu_device;
  t.def = ct_current_stream(t.d);
  t.a = ct_stream_create(t.d, 0);
  t.b = ct_stream_create(t.d, 0);
  if (!t.a || !t.b) return -1;
  if (ct_sanitizer_name_stream(t.a, "copy") || ct_sanitizer_name_stream(t.b, "compute")) return -1;
  *state = &t;
  return 0;
}

static int teardown(void **state) {
  two *t = *state;
  ct_sanitizer_set_mode(CT_SANITIZER_OFF);
  ct_set_stream(t->def);
  ct_stream_free(t->a);
  ct_stream_free(t->b);
  return 0;
}

// x, named "x", written with `value` on stream a (after a waited for the
// default stream, where x was made).
static ct_tensor *written_on_a(two *t, double value) {
  ct_tensor *x = ct_empty(CT_SHAPE(256), CT_F32, t->d);
  TU_CHECK(x);
  TU_OK(ct_sanitizer_name_tensor(x, "x"));
  TU_OK(ct_stream_wait_stream(t->a, t->def));
  TU_OK(ct_set_stream(t->a));
  TU_OK(ct_fill_(x, value));
  TU_OK(ct_set_stream(t->def));
  return x;
}

// y = 2 * x on stream b; NULL when the sanitizer refused it.
static ct_tensor *read_on_b(two *t, const ct_tensor *x) {
  TU_OK(ct_set_stream(t->b));
  ct_tensor *y = ct_mul_scalar(x, 2.0);
  TU_OK(ct_set_stream(t->def));
  return y;
}

// Frees y, made and used on b, after making the default stream wait for b.
static void drop_on_b(two *t, ct_tensor *y) {
  TU_OK(ct_stream_wait_stream(t->def, t->b));
  ct_free(y);
}

static double first(const ct_tensor *y) {
  ct_tensor *e = ct_narrow(y, 0, 0, 1);
  double v = -1;
  TU_CHECK(e);
  TU_OK(ct_item(e, &v));
  ct_free(e);
  return v;
}

static void test_missing_wait_is_caught(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  ct_tensor *x = written_on_a(t, 3.0);
  uint64_t before = ct_sanitizer_reports();
  size_t allocated = ct_memory_allocated(t->d);
  ct_tensor *y = read_on_b(t, x);
  assert_null(y);
  assert_int_equal(ct_last_status(), CT_ERR_RACE);
  const char *msg = ct_last_error();
  print_message("%s\n", msg);
  assert_non_null(strstr(msg, "ct_mul: stream-ordering race on tensor 'x'"));
  assert_non_null(strstr(msg, "read on stream 'compute'"));
  assert_non_null(strstr(msg, "the write by ct_fill_ on stream 'copy'"));
  assert_non_null(strstr(msg, "ct_stream_wait_stream"));
  assert_true(ct_sanitizer_reports() == before + 1);
  assert_string_equal(ct_sanitizer_last_report(), msg);
  assert_true(ct_memory_allocated(t->d) == allocated); // the refused op kept nothing
  // Usable afterwards: with the wait, the same read runs and sees a's value.
  TU_OK(ct_stream_wait_stream(t->b, t->a));
  y = read_on_b(t, x);
  TU_CHECK(y);
  assert_true(ct_sanitizer_reports() == before + 1);
  TU_OK(ct_record_stream(x, t->b));
  TU_OK(ct_stream_synchronize(t->b));
  assert_true(first(y) == 6.0);
  ct_free(y);
  ct_free(x);
  assert_true(ct_sanitizer_reports() == before + 1);
}

// Every kind of wait orders the read: silent.
static void test_each_wait_silences_it(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  uint64_t before = ct_sanitizer_reports();
  for (int how = 0; how < 5; ++how) {
    ct_tensor *x = written_on_a(t, 1.0 + how);
    ct_event *e = ct_event_create(t->d, false);
    TU_CHECK(e);
    TU_OK(ct_event_record(e, t->a));
    switch (how) {
    case 0: TU_OK(ct_stream_wait_stream(t->b, t->a)); break;
    case 1: TU_OK(ct_stream_wait_event(t->b, e)); break;
    case 2: TU_OK(ct_stream_synchronize(t->a)); break;
    case 3: TU_OK(ct_event_synchronize(e)); break;
    default: { // a blocking copy to the host on a: the host has waited for a
      float h[256];
      TU_OK(ct_set_stream(t->a));
      TU_OK(ct_copy_to_host(x, h, sizeof h));
      TU_OK(ct_set_stream(t->def));
    }
    }
    ct_tensor *y = read_on_b(t, x);
    if (!y) fail_msg("wait kind %d: %s", how, ct_last_error());
    TU_OK(ct_record_stream(x, t->b));
    drop_on_b(t, y);
    ct_free(x);
    ct_event_free(e);
  }
  assert_true(ct_sanitizer_reports() == before);
  // An event recorded *before* the write orders nothing after it.
  ct_event *early = ct_event_create(t->d, false);
  TU_CHECK(early);
  TU_OK(ct_event_record(early, t->a));
  ct_tensor *x = written_on_a(t, 9.0);
  TU_OK(ct_stream_wait_event(t->b, early));
  assert_null(read_on_b(t, x));
  assert_int_equal(ct_last_status(), CT_ERR_RACE);
  TU_OK(ct_stream_wait_stream(t->def, t->a));
  ct_free(x);
  ct_event_free(early);
}

// b reads x (ordered), then a writes x again without waiting for b: the
// write may land while b still reads.
static void test_write_after_unordered_read(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  ct_tensor *x = written_on_a(t, 1.0);
  TU_OK(ct_stream_wait_stream(t->b, t->a));
  ct_tensor *y = read_on_b(t, x);
  TU_CHECK(y);
  TU_OK(ct_set_stream(t->a));
  int rc = ct_fill_(x, 5.0);
  TU_OK(ct_set_stream(t->def));
  assert_int_equal(rc, CT_ERR_RACE);
  assert_non_null(strstr(ct_last_error(), "ct_fill_: stream-ordering race on tensor 'x'"));
  assert_non_null(strstr(ct_last_error(), "write on stream 'copy'"));
  assert_non_null(strstr(ct_last_error(), "the read by ct_mul on stream 'compute'"));
  assert_non_null(strstr(ct_last_error(), "may not have finished"));
  // With a waiting for b, the write is fine.
  TU_OK(ct_stream_wait_stream(t->a, t->b));
  TU_OK(ct_set_stream(t->a));
  TU_OK(ct_fill_(x, 5.0));
  TU_OK(ct_set_stream(t->def));
  TU_OK(ct_stream_wait_stream(t->def, t->a));
  assert_true(first(x) == 5.0);
  TU_OK(ct_record_stream(x, t->b));
  drop_on_b(t, y);
  ct_free(x);
}

// alloc.h's rule 1: a tensor allocated for stream a, used on b before b
// waits for a.
static void test_use_before_allocation_stream(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  TU_OK(ct_set_stream(t->a));
  ct_tensor *x = ct_empty(CT_SHAPE(64), CT_F32, t->d); // allocated for a
  TU_OK(ct_set_stream(t->b));
  TU_CHECK(x);
  TU_OK(ct_sanitizer_name_tensor(x, "buf"));
  int rc = ct_fill_(x, 1.0); // written on b
  assert_int_equal(rc, CT_ERR_RACE);
  assert_non_null(strstr(ct_last_error(), "tensor 'buf'"));
  assert_non_null(strstr(ct_last_error(), "it was allocated for stream 'copy'"));
  TU_OK(ct_stream_wait_stream(t->b, t->a));
  TU_OK(ct_fill_(x, 1.0));
  TU_OK(ct_set_stream(t->def));
  TU_OK(ct_record_stream(x, t->b));
  TU_OK(ct_stream_wait_stream(t->def, t->b));
  ct_free(x);
}

// alloc.h's rule 2: a tensor allocated for a, read on b, freed without
// ct_record_stream(x, b) while a does not know b's read.
static void test_free_without_record_stream(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  for (int how = 0; how < 3; ++how) {
    TU_OK(ct_set_stream(t->a));
    ct_tensor *x = ct_full(CT_SHAPE(64), 2.0, CT_F32, t->d); // allocated and written on a
    TU_CHECK(x);
    TU_OK(ct_sanitizer_name_tensor(x, "staged"));
    TU_OK(ct_stream_wait_stream(t->b, t->a));
    ct_tensor *y = read_on_b(t, x);
    TU_CHECK(y);
    if (how == 1) TU_OK(ct_record_stream(x, t->b));
    if (how == 2) TU_OK(ct_stream_wait_stream(t->a, t->b)); // a knows b's read
    uint64_t before = ct_sanitizer_reports();
    ct_free(x); // back to a's pool
    if (how == 0) {
      assert_true(ct_sanitizer_reports() == before + 1);
      const char *msg = ct_sanitizer_last_report();
      print_message("%s\n", msg);
      assert_non_null(strstr(msg, "ct_free: stream-ordering race on tensor 'staged'"));
      assert_non_null(strstr(msg, "freed while stream 'compute'"));
      assert_non_null(strstr(msg, "its read by ct_mul"));
      assert_non_null(strstr(msg, "ct_record_stream(t, compute)"));
    } else {
      assert_true(ct_sanitizer_reports() == before);
    }
    drop_on_b(t, y);
    TU_OK(ct_set_stream(t->def));
    TU_OK(ct_stream_wait_stream(t->def, t->a));
  }
}

// "warn" reports and runs the op; "off" says nothing.
static void test_warn_and_off(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_WARN));
  ct_tensor *x = written_on_a(t, 4.0);
  uint64_t before = ct_sanitizer_reports();
  ct_tensor *y = read_on_b(t, x);
  TU_CHECK(y); // the op ran
  assert_true(ct_sanitizer_reports() == before + 1);
  assert_non_null(strstr(ct_sanitizer_last_report(), "race on tensor 'x'"));
  TU_OK(ct_record_stream(x, t->b));
  TU_OK(ct_stream_synchronize(t->a));
  TU_OK(ct_stream_synchronize(t->b));
  drop_on_b(t, y);
  ct_free(x);
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_OFF));
  x = written_on_a(t, 4.0);
  y = read_on_b(t, x);
  TU_CHECK(y);
  assert_true(ct_sanitizer_reports() == before + 1);
  TU_OK(ct_stream_wait_stream(t->def, t->a));
  drop_on_b(t, y);
  ct_free(x);
  assert_int_equal(ct_sanitizer_set_mode(3), CT_ERR_VALUE);
  assert_int_equal(ct_sanitizer_mode(), CT_SANITIZER_OFF);
}

// A wait made while the sanitizer is off is not seen; records from before
// the gap are forgotten, so no race is invented across it.
static void test_off_gap_invents_nothing(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  ct_tensor *x = written_on_a(t, 2.0); // recorded: written on a
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_OFF));
  TU_OK(ct_stream_wait_stream(t->b, t->a)); // unseen
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  uint64_t before = ct_sanitizer_reports();
  ct_tensor *y = read_on_b(t, x);
  if (!y) fail_msg("a race invented across the gap: %s", ct_last_error());
  assert_true(ct_sanitizer_reports() == before);
  TU_OK(ct_record_stream(x, t->b));
  drop_on_b(t, y);
  ct_free(x);
}

// The host and a GPU (CUDA only): a non-blocking copy to pinned memory read
// before the stream is waited for races; after a synchronize it does not. A
// host write before an upload needs no wait (the host's work is done when
// the upload is issued).
static void test_host_and_gpu(void **state) {
  two *t = *state;
  if (t->d.type != CT_CUDA) skip();
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  ct_tensor *h = ct_full(CT_SHAPE(1), 7.0, CT_F32, ct_device_cpu()); // written by the host
  TU_CHECK(h);
  ct_tensor *g = ct_to(h, t->d, CT_F32, false); // upload on def: silent
  TU_CHECK(g);
  ct_tensor *back = ct_to(g, ct_device_cpu(), CT_F32, true); // lands in pinned memory, not waited for
  TU_CHECK(back);
  TU_OK(ct_sanitizer_name_tensor(back, "back"));
  double v = 0;
  assert_int_equal(ct_item(back, &v), CT_ERR_RACE);
  assert_non_null(strstr(ct_last_error(), "tensor 'back'"));
  assert_non_null(strstr(ct_last_error(), "the default stream (cuda:"));
  TU_OK(ct_stream_synchronize(ct_current_stream(t->d)));
  TU_OK(ct_item(back, &v));
  assert_true(v == 7.0);
  ct_free(back), ct_free(g), ct_free(h);
}

// A graph's ops run at replay, on the replay's stream: captured on a (the
// capture stream) and replayed on the default stream, where the input was
// written, nothing races; replayed on b, which does not know that write,
// the replay is refused before it runs, naming the tensor.
static void test_graph_replay_on_its_stream(void **state) {
  two *t = *state;
  TU_OK(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  uint64_t before = ct_sanitizer_reports();
  ct_tensor *in = ct_full(CT_SHAPE(64), 1.0, CT_F32, t->d);
  TU_CHECK(in);
  TU_OK(ct_sanitizer_name_tensor(in, "static_in"));
  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_stream_wait_stream(t->a, t->def));
  TU_OK(ct_cuda_graph_capture_begin(g, t->a, NULL));
  ct_tensor *out = ct_mul_scalar(in, 2.0); // recorded, from the graph's pool
  TU_OK(ct_cuda_graph_capture_end(g));
  TU_CHECK(out);
  TU_OK(ct_sanitizer_name_tensor(out, "static_out"));
  TU_OK(ct_fill_(in, 3.0)); // copy_ of new data into the static input, on the default stream
  TU_OK(ct_cuda_graph_replay(g));
  assert_true(first(out) == 6.0);
  assert_true(ct_sanitizer_reports() == before); // the capture's accesses were the replay's
  TU_OK(ct_fill_(in, 4.0));
  TU_OK(ct_set_stream(t->b)); // b does not know the write on the default stream
  assert_int_equal(ct_cuda_graph_replay(g), CT_ERR_RACE);
  const char *msg = ct_last_error();
  print_message("%s\n", msg);
  assert_non_null(strstr(msg, "ct_cuda_graph_replay: stream-ordering race on tensor 'static_"));
  assert_non_null(strstr(msg, "on stream 'compute'"));
  assert_true(ct_sanitizer_reports() == before + 1);
  TU_OK(ct_set_stream(t->def));
  ct_cuda_graph_free(g);
  ct_free(out);
  ct_free(in);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_missing_wait_is_caught),
      cmocka_unit_test(test_each_wait_silences_it),
      cmocka_unit_test(test_write_after_unordered_read),
      cmocka_unit_test(test_use_before_allocation_stream),
      cmocka_unit_test(test_free_without_record_stream),
      cmocka_unit_test(test_warn_and_off),
      cmocka_unit_test(test_off_gap_invents_nothing),
      cmocka_unit_test(test_host_and_gpu),
      cmocka_unit_test(test_graph_replay_on_its_stream),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
