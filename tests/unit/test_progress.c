// SPDX-License-Identifier: MIT
//
// test_progress: what the progress bar writes, byte by byte.
//
// Invariants checked (progress.h):
//  - not a terminal: nothing while the epoch runs, then exactly one line per
//    epoch, "epoch E/N: loss L, S samples/s, T s[, extra]", with the last
//    loss given, the samples counted here over the time measured here around
//    the calls, and ct_progress_finish returning the samples/s it printed;
//  - a terminal (force_tty): "\r" redraws with the bar, the step count and an
//    ETA, throttled (a fast loop of 50 steps draws a handful of times, not
//    50), then the plain final line and a newline;
//  - out = NULL writes to stdout; nothing is ever written to stderr.
#define _POSIX_C_SOURCE 200809L // nanosleep, fileno, dup

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

// Everything written to f so far, as a string (caller frees).
static char *contents(FILE *f) {
  fflush(f);
  long n = ftell(f);
  rewind(f);
  char *s = calloc((size_t)n + 1, 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  fseek(f, 0, SEEK_END);
  return s;
}

static int count_char(const char *s, char c) {
  int k = 0;
  for (; *s; s++) k += *s == c;
  return k;
}

// Runs one epoch of `steps` steps of `batch` samples, sleeping `ms` per step;
// losses go 1.0, 0.9, ... Returns the measured wall time in *seconds.
static double epoch(FILE *out, int e, int epochs, int steps, int batch, int ms, bool tty, const char *extra,
                    double *seconds) {
  double t0 = now();
  ct_progress *p = ct_progress_start(out, e, epochs, steps, tty);
  assert_non_null(p);
  for (int i = 0; i < steps; i++) {
    if (ms) sleep_ms(ms);
    ct_progress_step(p, 1.0 - 0.1 * i, batch);
  }
  double sps = ct_progress_finish(p, extra);
  *seconds = now() - t0;
  return sps;
}

// Checks one plain line against what was done: loss, samples/s within what
// the measured time allows, the time, the extra text.
static void check_line(const char *line, int e, int epochs, double loss, int64_t samples, double sps,
                       double seconds, double min_seconds, const char *extra) {
  int ge, gn, used = 0;
  double gl, gs, gt;
  char unit[3] = "";
  if (sscanf(line, "epoch %d/%d: loss %lf, %lf samples/s, %lf %2[ms]%n", &ge, &gn, &gl, &gs, &gt, unit,
             &used) != 6)
    fail_msg("line \"%s\" is not \"epoch E/N: loss L, S samples/s, T s|ms\"", line);
  // Under a second the time is in milliseconds, to one decimal.
  if (!strcmp(unit, "ms")) gt /= 1e3;
  else assert_string_equal(unit, "s");
  assert_int_equal(ge, e);
  assert_int_equal(gn, epochs);
  assert_true(fabs(gl - loss) < 1e-9);
  char want_sps[32];
  snprintf(want_sps, sizeof want_sps, "%.0f", sps); // the number printed is the number returned
  assert_true(fabs(gs - atof(want_sps)) < 0.5);
  // The epoch lasted between min_seconds (the sleeps) and `seconds` (measured around it).
  if (!(gs >= samples / seconds - 1 && gs <= samples / min_seconds + 1))
    fail_msg("samples/s %g outside [%g, %g]", gs, samples / seconds, samples / min_seconds);
  // Printed to one decimal (of seconds or of milliseconds): allow that rounding.
  assert_true(gt >= min_seconds - 0.05 - 1e-9 && gt <= seconds + 0.05);
  const char *rest = line + used;
  if (extra) {
    char want[128];
    snprintf(want, sizeof want, ", %s", extra);
    assert_string_equal(rest, want);
  } else {
    assert_string_equal(rest, "");
  }
}

static void test_plain_lines(void **state) {
  (void)state;
  FILE *f = tmpfile();
  assert_non_null(f);
  double sec[3], sps[3];
  const char *extra[3] = {"test acc 0.8812", NULL, "lr 0.01"};
  for (int e = 0; e < 3; e++) {
    sps[e] = epoch(f, e + 1, 3, 5, 32, 20, false, extra[e], &sec[e]);
    // Nothing but finished lines, ever: no partial line while running.
    char *s = contents(f);
    assert_int_equal(count_char(s, '\n'), e + 1);
    assert_int_equal(s[strlen(s) - 1], '\n');
    free(s);
  }
  char *s = contents(f);
  assert_null(strchr(s, '\r'));
  char *save = NULL, *line = strtok_r(s, "\n", &save);
  for (int e = 0; e < 3; e++, line = strtok_r(NULL, "\n", &save)) {
    assert_non_null(line);
    check_line(line, e + 1, 3, 1.0 - 0.1 * 4, 5 * 32, sps[e], sec[e], 5 * 0.020, extra[e]);
  }
  assert_null(line);
  free(s);
  fclose(f);
}

static void test_empty_epoch(void **state) {
  (void)state;
  FILE *f = tmpfile();
  ct_progress *p = ct_progress_start(f, 1, 1, 0, false);
  assert_non_null(p);
  assert_true(ct_progress_finish(p, "") == 0.0);
  char *s = contents(f);
  int used = 0;
  double t;
  char unit[3] = "";
  assert_int_equal(sscanf(s, "epoch 1/1: 0 samples/s, %lf %2[ms]\n%n", &t, unit, &used), 2);
  assert_true(!strcmp(unit, "ms") || !strcmp(unit, "s"));
  assert_int_equal((size_t)used, strlen(s));
  free(s);
  fclose(f);
  // NULL is a no-op, as free(NULL).
  ct_progress_step(NULL, 1.0, 1);
  assert_true(ct_progress_finish(NULL, NULL) == 0.0);
}

static void test_terminal(void **state) {
  (void)state;
  FILE *f = tmpfile();
  double sec;
  // A fast loop: drawn at the first and the last step, and once at the end.
  double sps = epoch(f, 2, 4, 50, 8, 0, true, "test acc 0.5", &sec);
  char *s = contents(f);
  int cr = count_char(s, '\r');
  if (cr < 3 || cr > 10) fail_msg("%d redraws for 50 fast steps (want 3: first step, last step, end)", cr);
  assert_int_equal(count_char(s, '\n'), 1);
  assert_int_equal(s[strlen(s) - 1], '\n');
  assert_non_null(strstr(s, "\repoch 2/4 [--------------------]   1/50 loss 1 "));
  assert_non_null(strstr(s, "\repoch 2/4 [####################]  50/50 loss -3.9 "));
  // The final line, after the last "\r", is the plain line padded with spaces.
  char *last = strrchr(s, '\r') + 1;
  size_t n = strlen(last);
  last[--n] = '\0'; // the newline
  while (n && last[n - 1] == ' ') last[--n] = '\0';
  check_line(last, 2, 4, 1.0 - 0.1 * 49, 50 * 8, sps, sec, 0, "test acc 0.5");
  free(s);
  fclose(f);

  // A slow loop redraws about ten times a second, with an ETA while running.
  f = tmpfile();
  epoch(f, 1, 1, 12, 4, 30, true, NULL, &sec);
  s = contents(f);
  cr = count_char(s, '\r');
  if (cr < 4 || cr > 13) fail_msg("%d redraws for 12 steps of 30 ms (want about one per 100 ms)", cr);
  assert_non_null(strstr(s, "ETA 0:00"));
  assert_non_null(strstr(s, " 1/12 loss"));
  free(s);
  fclose(f);
}

static void test_stdout_not_stderr(void **state) {
  (void)state;
  FILE *o = tmpfile(), *e = tmpfile();
  fflush(stdout);
  fflush(stderr);
  int so = dup(1), se = dup(2);
  assert_true(so >= 0 && se >= 0);
  assert_true(dup2(fileno(o), 1) >= 0 && dup2(fileno(e), 2) >= 0);
  double sec;
  epoch(NULL, 1, 2, 3, 10, 0, false, NULL, &sec);
  ct_progress *p = ct_progress_start(NULL, 2, 2, 3, true);
  ct_progress_step(p, 0.25, 10);
  ct_progress_finish(p, NULL);
  fflush(stdout);
  fflush(stderr);
  dup2(so, 1);
  dup2(se, 2);
  close(so);
  close(se);
  fseek(o, 0, SEEK_END);
  fseek(e, 0, SEEK_END);
  char *out = contents(o), *err = contents(e);
  assert_string_equal(err, "");
  assert_non_null(strstr(out, "epoch 1/2: loss 0.8, "));
  assert_non_null(strstr(out, "\repoch 2/2: loss 0.25, "));
  free(out);
  free(err);
  fclose(o);
  fclose(e);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_lines),
      cmocka_unit_test(test_empty_epoch),
      cmocka_unit_test(test_terminal),
      cmocka_unit_test(test_stdout_not_stderr),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
