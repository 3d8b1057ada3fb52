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
