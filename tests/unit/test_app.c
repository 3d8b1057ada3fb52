// SPDX-License-Identifier: MIT
//
// test_app: what ct_app gives every chapter besides the flags (cli.h).
//
// Invariants checked:
//  - ct_cli_median is the middle value of the sorted input (the mean of the
//    middle two for an even count), leaves its input as it was, takes more
//    values than its stack buffer holds, and is NAN for no values; checked
//    against a median computed here by insertion sort;
//  - ct_cli_cmp_double orders qsort ascending, equal values compare 0;
//  - ct_cli_seconds never goes back and measures a sleep;
//  - ct_cli_synchronize returns CT_OK on the device under test;
//  - ct_cli_threads is OpenMP's thread count, and follows omp_set_num_threads;
//  - ct_metrics_print prints its line exactly as printf would and records
//    the first argument under its key; a first conversion that is not a
//    double records nothing;
//  - ct_cli_begin opens cli.metrics with "device", "seed" and "quick" as the
//    file's first keys, and writes no file when $RANK names another rank.
#define _POSIX_C_SOURCE 200809L // nanosleep, fileno, dup, setenv, mkdtemp

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#ifdef _OPENMP
#include <omp.h>
#endif

// The median by another route: insertion sort of a copy.
static double median_ref(const double *v, int n) {
  double s[256];
  for (int i = 0; i < n; i++) {
    int j = i;
    for (; j > 0 && s[j - 1] > v[i]; j--) s[j] = s[j - 1];
    s[j] = v[i];
  }
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void test_median(void **state) {
  (void)state;
  const double odd[] = {5, 1, 4, 2, 3};
  assert_true(ct_cli_median(odd, 5) == 3.0);
  const double even[] = {10, 2, 8, 4};
  assert_true(ct_cli_median(even, 4) == 6.0);
  double one = 7.5;
  assert_true(ct_cli_median(&one, 1) == 7.5);
  assert_true(isnan(ct_cli_median(odd, 0)));
  // more values than the stack copy holds (64); the input stays in its order
  double many[201], before[201];
  uint32_t x = 12345;
  for (int i = 0; i < 201; i++) {
    x = x * 1664525u + 1013904223u;
    many[i] = before[i] = (double)(x >> 8) / 65536.0;
  }
  for (int n = 1; n <= 201; n += 25) assert_true(ct_cli_median(many, n) == median_ref(many, n));
  assert_memory_equal(many, before, sizeof many);
}

static void test_cmp_double(void **state) {
  (void)state;
  double v[] = {3, -1, 2.5, -1, 0};
  qsort(v, 5, sizeof v[0], ct_cli_cmp_double);
  const double want[] = {-1, -1, 0, 2.5, 3};
  assert_memory_equal(v, want, sizeof v);
  double a = 1, b = 1;
  assert_int_equal(ct_cli_cmp_double(&a, &b), 0);
}

static void test_seconds(void **state) {
  (void)state;
  double t0 = ct_cli_seconds(), prev = t0;
  for (int i = 0; i < 1000; i++) {
    double t = ct_cli_seconds();
    assert_true(t >= prev);
    prev = t;
  }
  struct timespec ts = {0, 20 * 1000000L};
  nanosleep(&ts, NULL);
  assert_true(ct_cli_seconds() - t0 >= 0.015);
}

static void test_synchronize(void **state) {
  (void)state;
  ct_tensor *t = ct_ones(CT_SHAPE(1024), CT_F32, tu_device);
  assert_non_null(t);
  assert_int_equal(ct_cli_synchronize(tu_device), CT_OK);
  ct_free(t);
}

static void test_threads(void **state) {
  (void)state;
  assert_true(ct_cli_threads() >= 1);
#ifdef _OPENMP
  int was = omp_get_max_threads();
  assert_int_equal(ct_cli_threads(), was);
  omp_set_num_threads(was + 2);
  assert_int_equal(ct_cli_threads(), was + 2);
  omp_set_num_threads(was);
#endif
}

// The whole of a small file, as a string (caller frees); NULL when absent.
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = calloc(4096, 1);
  assert_non_null(s);
  size_t n = fread(s, 1, 4095, f);
  s[n] = '\0';
  fclose(f);
  return s;
}

// Runs fn with stdout sent to a file; returns what it printed (caller frees).
static char *captured(void (*fn)(void *), void *arg) {
  char path[] = "/tmp/ct_test_app_out_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fd, STDOUT_FILENO) >= 0);
  fn(arg);
  fflush(stdout);
  assert_true(dup2(saved, STDOUT_FILENO) >= 0);
  close(saved);
  close(fd);
  char *s = slurp(path);
  unlink(path);
  assert_non_null(s);
  return s;
}

static void print_figures(void *arg) {
  ct_metrics *m = arg;
  ct_metrics_print(m, "compile_ms", "compiled in %.1f ms (%s)\n", 12.345, "cold");
  ct_metrics_print(m, "nodes", "%5.0f%% of %d\n", 42.0, 7);
  ct_metrics_print(m, "count", "%d items\n", 3); // not a double: printed, not recorded
}

static void test_metrics_print(void **state) {
  (void)state;
  char dir[] = "/tmp/ct_test_app_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/m.json", dir);
  ct_metrics *m = ct_metrics_open(path);
  assert_non_null(m);
  char *out = captured(print_figures, m);
  assert_string_equal(out, "compiled in 12.3 ms (cold)\n   42% of 7\n3 items\n");
  free(out);
  assert_int_equal(ct_metrics_close(m), CT_OK);
  char *json = slurp(path);
  assert_non_null(json);
  assert_string_equal(json, "{\n  \"compile_ms\": 12.345,\n  \"nodes\": 42\n}\n");
  free(json);
  // a sink: prints, records nothing, never fails
  out = captured(print_figures, NULL);
  assert_string_equal(out, "compiled in 12.3 ms (cold)\n   42% of 7\n3 items\n");
  free(out);
  unlink(path);
  rmdir(dir);
}

static void begin(void *arg) { ct_cli_begin(arg); }

static void test_begin_records(void **state) {
  (void)state;
  char dir[] = "/tmp/ct_test_app_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128], dev[CT_DEVICE_STR_MAX], want[256];
  snprintf(path, sizeof path, "%s/m.json", dir);
  ct_device_str(tu_device, dev);
  for (int rank = 0; rank < 3; rank++) { // no $RANK, RANK=0, RANK=1
    if (rank == 0) unsetenv("RANK");
    else setenv("RANK", rank == 1 ? "0" : "1", 1);
    ct_cli cli = {.program = "test_app", .device_spec = dev, .seed = 7, .quick = true, .metrics_path = path};
    char *out = captured(begin, &cli);
    assert_non_null(strstr(out, "device: "));
    free(out);
    assert_non_null(cli.metrics);
    ct_metrics_num(cli.metrics, "later", 1.5);
    assert_int_equal(ct_metrics_close(cli.metrics), CT_OK);
    char *json = slurp(path);
    if (rank == 2) {
      assert_null(json); // another rank writes nothing
    } else {
      snprintf(want, sizeof want, "{\n  \"device\": \"%s\",\n  \"seed\": 7,\n  \"quick\": 1,\n  \"later\": 1.5\n}\n",
               dev);
      assert_non_null(json);
      assert_string_equal(json, want);
      free(json);
      unlink(path);
    }
  }
  unsetenv("RANK");
  rmdir(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_median),        cmocka_unit_test(test_cmp_double),
      cmocka_unit_test(test_seconds),       cmocka_unit_test(test_synchronize),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_metrics_print), cmocka_unit_test(test_begin_records),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
