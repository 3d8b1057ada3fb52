// SPDX-License-Identifier: MIT
//
// timing: the clock, the wait for the device and the median that every
// chapter which times work uses (declared in cli.h, with the metrics).
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "ops.h"
#include "tensor.h"

#ifdef _OPENMP
#include <omp.h>
#endif

double ct_cli_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ct_cli_synchronize(ct_device d) { return d.type == CT_CUDA ? ct_cuda_synchronize(d.index) : CT_OK; }

int ct_cli_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

int ct_cli_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double ct_cli_median(const double *v, int n) {
  if (n < 1 || !v) return NAN;
  double small[64], *s = n <= 64 ? small : malloc((size_t)n * sizeof *s);
  if (!s) {
    ct_fail(CT_ERR_OOM, "ct_cli_median: out of host memory copying %d values", n);
    return NAN;
  }
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, ct_cli_cmp_double);
  double mid = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  if (s != small) free(s);
  return mid;
}

double ct_cli_matmul_gflops(ct_device d, int64_t *n_out) {
  enum { REPS = 5 };
  const int64_t n = d.type == CT_CUDA ? 4096 : 1024;
  if (n_out) *n_out = n;
  ct_tensor *a = ct_ones(CT_SHAPE(n, n), CT_F32, d), *b = a ? ct_ones(CT_SHAPE(n, n), CT_F32, d) : NULL; // no draw from the generator
  double gflops[REPS];
  int done = 0;
  for (int i = -1; b && i < REPS; ++i) { // i = -1: the warm-up, not timed
    double t0 = ct_cli_seconds();
    ct_tensor *c = ct_mm(a, b);
    int rc = c ? ct_cli_synchronize(d) : -1;
    double s = ct_cli_seconds() - t0;
    ct_free(c);
    if (rc != CT_OK) break;
    if (i >= 0) gflops[done++] = 2.0 * (double)n * (double)n * (double)n / s * 1e-9;
  }
  ct_free(a);
  ct_free(b);
  return done == REPS ? ct_cli_median(gflops, REPS) : NAN;
}
