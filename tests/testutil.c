// SPDX-License-Identifier: MIT
//
// testutil: device selection, fresh-but-replayable inputs, and float64
// comparisons for the test binaries (see testutil.h).
#define _GNU_SOURCE // mkdtemp
#include "testutil.h"

#include <dirent.h>
#include <unistd.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

ct_device tu_device;
ct_device tu_devices[2];
int tu_ndevices;
static uint64_t seed_value;
static uint64_t rng_state;

static _Noreturn void usage(const char *prog) {
  fprintf(stderr, "usage: %s [--device cpu|cuda] [--devices cpu[,cuda]]\n", prog);
  exit(2);
}

static ct_device need(const char *spec) {
  if (!strcmp(spec, "cpu")) return ct_device_cpu();
  if (!strcmp(spec, "cuda")) {
    if (!ct_cuda_is_available()) {
      printf("skipped: CUDA unavailable: %s\n", ct_cuda_unavailable_reason());
      exit(77);
    }
    return ct_device_cuda(0);
  }
  fprintf(stderr, "unknown device \"%s\" (expected cpu or cuda)\n", spec);
  exit(2);
}

void tu_init(int argc, char **argv) {
  tu_device = ct_device_cpu();
  tu_devices[0] = ct_device_cpu();
  tu_ndevices = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      tu_device = need(argv[++i]);
    } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
      const char *s = argv[++i];
      if (!strcmp(s, "cpu")) tu_ndevices = 1;
      else if (!strcmp(s, "cpu,cuda")) tu_devices[1] = need("cuda"), tu_ndevices = 2;
      else usage(argv[0]);
    } else {
      usage(argv[0]);
    }
  }
  const char *env = getenv("CT_TEST_SEED");
  if (env && *env) seed_value = strtoull(env, NULL, 10);
  else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed_value = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
  }
  printf("test seed %" PRIu64 " (replay with CT_TEST_SEED=%" PRIu64 ")\n", seed_value, seed_value);
  rng_state = seed_value ? seed_value : 1;
  ct_manual_seed(seed_value);
  ct_alloc_set_poison(true);
}

uint64_t tu_seed(void) { return seed_value; }

double tu_rtol(ct_dtype dt) {
  switch (dt) {
  case CT_F16: return 2e-3;
  case CT_BF16: return 1.6e-2;
  case CT_F32: return 1.3e-6;
  case CT_F64: return 1e-12;
  default: return 0;
  }
}

double tu_atol(ct_dtype dt) {
  switch (dt) {
  case CT_F16: return 1e-5;
  case CT_BF16: return 1e-5;
  case CT_F32: return 1e-6;
  case CT_F64: return 1e-12;
  default: return 0;
  }
}

// splitmix64: a host-side generator independent of the runtime's Philox.
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void tu_fill_uniform(double *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; ++i) x[i] = lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1p-53);
}

ct_tensor *tu_from_f64(const double *x, ct_shape shape, ct_dtype dt, ct_device dev) {
  int64_t n = ct_shape_numel(shape);
  size_t es = ct_dtype_size(dt);
  unsigned char *buf = malloc((size_t)(n ? n : 1) * es);
  if (!buf) return NULL;
  for (int64_t i = 0; i < n; ++i) ct_store_f64(buf + (size_t)i * es, dt, x[i]);
  ct_tensor *t = ct_from_host(buf, shape, dt, dev);
  free(buf);
  return t;
}

double *tu_to_f64(const ct_tensor *t) {
  int64_t n = ct_numel(t);
  size_t es = ct_dtype_size(ct_dtype_of(t));
  unsigned char *buf = malloc((size_t)(n ? n : 1) * es);
  double *out = malloc((size_t)(n ? n : 1) * sizeof(double));
  if (!buf || !out || ct_copy_to_host(t, buf, (size_t)n * es) != CT_OK) {
    free(buf);
    free(out);
    return NULL;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = ct_load_f64(buf + (size_t)i * es, ct_dtype_of(t));
  free(buf);
  return out;
}

void tu_assert_close(const ct_tensor *t, const double *ref, double rtol, double atol, const char *what) {
  if (!t) fail_msg("%s: tensor is NULL: %s", what, ct_last_error());
  double *got = tu_to_f64(t);
  if (!got) fail_msg("%s: could not read the tensor back: %s", what, ct_last_error());
  int64_t n = ct_numel(t);
  for (int64_t i = 0; i < n; ++i) {
    double g = got[i], r = ref[i];
    bool ok;
    if (isnan(r)) ok = isnan(g);
    else if (isinf(r)) ok = g == r;
    else ok = !isnan(g) && fabs(g - r) <= atol + rtol * fabs(r);
    if (!ok) {
      free(got);
      fail_msg("%s: element %" PRId64 " of %" PRId64 ": got %.17g, expected %.17g (rtol %g, atol %g)",
               what, i, n, g, r, rtol, atol);
    }
  }
  free(got);
}

void tu_assert_error_contains(const char *needle, const char *what) {
  const char *msg = ct_last_error();
  if (!strstr(msg, needle))
    fail_msg("%s: expected an error containing \"%s\", got \"%s\"", what, needle, msg);
}

static const char *scratch_root(void) {
  const char *t = getenv("TMPDIR");
  if (t && *t) return t;
  return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

int tu_scratch_dir(char *dir, size_t n, const char *tag) {
  int len = snprintf(dir, n, "%s/ct_%s_XXXXXX", scratch_root(), tag);
  if (len < 0 || (size_t)len >= n) return -1;
  return mkdtemp(dir) ? 0 : -1;
}

const char *tu_scratch_path(const char *dir, const char *name) {
  static char buf[4][640];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

int tu_scratch_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    unlink(tu_scratch_path(dir, e->d_name));
  }
  closedir(d);
  rmdir(dir);
  return 0;
}
