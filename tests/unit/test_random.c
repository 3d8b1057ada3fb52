// SPDX-License-Identifier: MIT
//
// test_random: the Philox block function, the generators' (seed, offset)
// bookkeeping, and ct_rand / ct_randn on the device under test.
//
// Invariant checked: ct_philox4x32_10 reproduces Random123's published
// known-answer vectors (kat_vectors, "philox4x32 10" lines; also re-derived
// by an independent Python implementation while writing this test); every
// element of a random tensor equals the recipe in random.h recomputed here on
// the host from that block function; the offset advances by ceil(n/4) per
// tensor; uniforms stay in [0, 1) in every dtype; the samples have the mean
// and variance of their distributions within 5 standard errors.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"
#include "tu_ref.h"

#define TWO_PI 6.283185307179586476925286766559

static const ct_dtype float_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16};
#define NFDT 4

// What the generator said before tu_init seeded it (see main).
static uint64_t pre_seed, pre_offset;

// ---- the block function ------------------------------------------------------------
static void test_philox_known_answers(void **state) {
  (void)state;
  // Random123 kat_vectors: counter[4] key[2] -> output[4].
  static const uint32_t kat[3][10] = {
      {0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
       0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
       0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
       0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int v = 0; v < 3; ++v) {
    uint32_t out[4] = {0, 0, 0, 0};
    ct_philox4x32_10(&kat[v][0], &kat[v][4], out);
    for (int i = 0; i < 4; ++i)
      if (out[i] != kat[v][6 + i])
        fail_msg("vector %d word %d: 0x%08x, expected 0x%08x", v, i, out[i], kat[v][6 + i]);
  }
}

// ---- seeds and offsets ---------------------------------------------------------------
static void test_default_seed(void **state) {
  (void)state;
  // PyTorch's default_rng_seed_val, before anything seeds the generators.
  assert_true(pre_seed == UINT64_C(67280421310721));
  assert_true(pre_offset == 0);
}

static void test_seed_and_offsets(void **state) {
  (void)state;
  const ct_device cpu = ct_device_cpu(), g0 = ct_device_cuda(0), g1 = ct_device_cuda(1);
  const uint64_t s = UINT64_C(0x0123456789abcdef);
  ct_manual_seed(s);
  assert_true(ct_initial_seed() == s);
  uint64_t seed = 0, off = 99;
  ct_philox_reserve(cpu, 5, &seed, &off);
  assert_true(seed == s && off == 0);
  ct_philox_reserve(cpu, 3, &seed, &off);
  assert_true(seed == s && off == 5);
  assert_true(ct_philox_offset(cpu) == 8);
  // Each device keeps its own offset.
  assert_true(ct_philox_offset(g0) == 0);
  ct_philox_reserve(g0, 7, &seed, &off);
  assert_true(seed == s && off == 0);
  assert_true(ct_philox_offset(g0) == 7);
  assert_true(ct_philox_offset(g1) == 0);
  assert_true(ct_philox_offset(cpu) == 8);
  // Reserving nothing moves nothing.
  ct_philox_reserve(cpu, 0, &seed, &off);
  assert_true(off == 8 && ct_philox_offset(cpu) == 8);
  // manual_seed resets every device.
  ct_manual_seed(42);
  assert_true(ct_initial_seed() == 42);
  assert_true(ct_philox_offset(cpu) == 0 && ct_philox_offset(g0) == 0);
  ct_philox_reserve(g1, 1, &seed, &off);
  assert_true(seed == 42 && off == 0);
  // A device no generator covers: an error, nothing advanced.
  ct_clear_error();
  ct_philox_reserve(ct_device_cuda(CT_MAX_CUDA_DEVICES), 4, &seed, &off);
  assert_int_equal(ct_last_status(), CT_ERR_DEVICE);
}

// Reservations from many threads never overlap and lose nothing.
#define NTHREADS 4
#define NRES 2000
typedef struct res_job {
  int k;
  uint64_t offs[NRES];
} res_job;

static void *reserve_many(void *p) {
  res_job *j = (res_job *)p;
  for (int i = 0; i < NRES; ++i) {
    uint64_t seed;
    ct_philox_reserve(ct_device_cpu(), (uint64_t)j->k, &seed, &j->offs[i]);
  }
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void test_reserve_threads(void **state) {
  (void)state;
  ct_manual_seed(7);
  static res_job jobs[NTHREADS];
  pthread_t th[NTHREADS];
  uint64_t total = 0;
  for (int t = 0; t < NTHREADS; ++t) {
    jobs[t].k = t + 1;
    total += (uint64_t)(t + 1) * NRES;
    assert_int_equal(pthread_create(&th[t], NULL, reserve_many, &jobs[t]), 0);
  }
  for (int t = 0; t < NTHREADS; ++t) pthread_join(th[t], NULL);
  assert_true(ct_philox_offset(ct_device_cpu()) == total);
  // Intervals [off, off + k) sorted by start must tile [0, total) exactly.
  static uint64_t starts[NTHREADS * NRES][2];
  int n = 0;
  for (int t = 0; t < NTHREADS; ++t)
    for (int i = 0; i < NRES; ++i) {
      starts[n][0] = jobs[t].offs[i];
      starts[n][1] = (uint64_t)jobs[t].k;
      ++n;
    }
  qsort(starts, (size_t)n, sizeof starts[0], cmp_u64);
  uint64_t next = 0;
  for (int i = 0; i < n; ++i) {
    if (starts[i][0] != next) fail_msg("reservation %d starts at %llu, expected %llu", i,
                                       (unsigned long long)starts[i][0], (unsigned long long)next);
    next += starts[i][1];
  }
  assert_true(next == total);
}

// ---- the recipe, recomputed on the host ---------------------------------------------
static uint32_t ref_bits(uint64_t seed, uint64_t offset, int64_t i) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const uint64_t c = offset + (uint64_t)i / 4;
  const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0, 0};
  uint32_t out[4];
  ct_philox4x32_10(ctr, key, out);
  return out[i % 4];
}

static double ref_uniform(uint64_t seed, uint64_t offset, int64_t i) {
  return (double)(ref_bits(seed, offset, i) >> 8) * 0x1p-24;
}

// The uniform random.h gives dtype dt: its top p bits, p = 11 (float16),
// 8 (bfloat16), 24 (float32, float64): exact in dt, below 1.
static double ref_uniform_dt(uint64_t seed, uint64_t offset, int64_t i, ct_dtype dt) {
  int p = dt == CT_F16 ? 11 : dt == CT_BF16 ? 8 : 24;
  return ldexp((double)(ref_bits(seed, offset, i) >> (32 - p)), -p);
}

static double ref_normal(uint64_t seed, uint64_t offset, int64_t i) {
  const int64_t j = i & ~(int64_t)1;
  const double u0 = ref_uniform(seed, offset, j), u1 = ref_uniform(seed, offset, j + 1);
  const double r = sqrt(-2.0 * log(1.0 - u0)), theta = TWO_PI * u1;
  return (i & 1) ? r * sin(theta) : r * cos(theta);
}


// Checks a uniform tensor element by element against the recipe: every
// dtype holds its uniform exactly, and it stays below 1 (random.h).
static void check_uniform(const ct_tensor *t, uint64_t seed, uint64_t offset, const char *what) {
  ct_dtype dt = ct_dtype_of(t);
  int64_t n = ct_numel(t);
  double *got = tu_to_f64(t);
  TU_CHECK(got);
  for (int64_t i = 0; i < n; ++i) {
    double u = ref_uniform_dt(seed, offset, i, dt), g = got[i];
    if (!(g >= 0.0 && g < 1.0))
      fail_msg("%s (%s): element %lld = %.9g outside [0, 1) (recipe %.9g)", what,
               ct_dtype_name(dt), (long long)i, g, u);
    bool ok = g == u;
    if (!ok)
      fail_msg("%s (%s): element %lld = %.9g, recipe %.9g", what, ct_dtype_name(dt), (long long)i,
               g, u);
  }
  free(got);
}

// Normals: the recipe in float64, stored in dt; f16/bf16 within one of their
// ulps (the value may pass through float32 first), f32 within 1e-6 relative
// (a GPU's log/sin/cos may differ from the host's in the last double bits).
static void check_normal(const ct_tensor *t, uint64_t seed, uint64_t offset, const char *what) {
  ct_dtype dt = ct_dtype_of(t);
  int64_t n = ct_numel(t);
  double *ref = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = ref_cast(ref_normal(seed, offset, i), dt);
  double rtol = dt == CT_F64 ? 1e-12 : dt == CT_F32 ? 1e-6 : 2.0 * ref_eps(dt);
  double atol = dt == CT_F16 ? 0x1p-24 : 1e-30; // f16's subnormal quantum
  tu_assert_close(t, ref, rtol, atol, what);
  free(ref);
}

static void test_rand_matches_recipe(void **state) {
  (void)state;
  const ct_shape shapes[] = {CT_SHAPE(1), CT_SHAPE(3), CT_SHAPE(4), CT_SHAPE(4097), CT_SHAPE(2, 3, 5)};
  for (int k = 0; k < NFDT; ++k)
    for (int s = 0; s < 5; ++s)
      for (int normal = 0; normal < 2; ++normal) {
        ct_dtype dt = float_dtypes[k];
        uint64_t seed = tu_seed() + (uint64_t)(10 * k + s);
        ct_manual_seed(seed);
        int64_t n = ct_shape_numel(shapes[s]);
        uint64_t per = (uint64_t)(n + 3) / 4;
        // Two tensors in a row: the second continues where the first stopped.
        for (int rep = 0; rep < 2; ++rep) {
          uint64_t off = ct_philox_offset(tu_device);
          assert_true(off == (uint64_t)rep * per);
          ct_tensor *t = normal ? ct_randn(shapes[s], dt, tu_device) : ct_rand(shapes[s], dt, tu_device);
          TU_CHECK(t);
          assert_true(ct_shape_eq(ct_shape_of(t), shapes[s]));
          assert_true(ct_philox_offset(tu_device) == off + per);
          char what[96];
          snprintf(what, sizeof what, "%s n=%lld rep %d", normal ? "ct_randn" : "ct_rand",
                   (long long)n, rep);
          if (normal)
            check_normal(t, seed, off, what);
          else
            check_uniform(t, seed, off, what);
          ct_free(t);
        }
      }
}

static void test_rand_statistics(void **state) {
  (void)state;
  const int64_t n = 1 << 16;
  for (int k = 0; k < NFDT; ++k) {
    ct_dtype dt = float_dtypes[k];
    ct_manual_seed(tu_seed() + 1000 + (uint64_t)k);
    ct_tensor *u = ct_rand(CT_SHAPE(n), dt, tu_device);
    ct_tensor *z = ct_randn(CT_SHAPE(n), dt, tu_device);
    TU_CHECK(u);
    TU_CHECK(z);
    double *hu = tu_to_f64(u), *hz = tu_to_f64(z);
    TU_CHECK(hu);
    TU_CHECK(hz);
    double su = 0, sz = 0, szz = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!(hu[i] >= 0.0 && hu[i] < 1.0))
        fail_msg("ct_rand (%s): element %lld = %.9g outside [0, 1)", ct_dtype_name(dt), (long long)i,
                 hu[i]);
      su += hu[i];
      sz += hz[i];
    }
    double mu = su / n, mz = sz / n;
    for (int64_t i = 0; i < n; ++i) szz += (hz[i] - mz) * (hz[i] - mz);
    double vz = szz / (n - 1);
    print_message("%s: rand mean %.5f, randn mean %.5f var %.5f\n", ct_dtype_name(dt), mu, mz, vz);
    // Standard errors: uniform mean sqrt(1/12/n); normal mean 1/sqrt(n),
    // normal variance sqrt(2/n).
    assert_true(fabs(mu - 0.5) < 5.0 * sqrt(1.0 / 12.0 / n));
    assert_true(fabs(mz) < 5.0 / sqrt((double)n));
    assert_true(fabs(vz - 1.0) < 5.0 * sqrt(2.0 / n));
    free(hu);
    free(hz);
    ct_free(u);
    ct_free(z);
  }
}

// Different seeds give different streams; the same seed the same one.
static void test_same_seed_same_numbers(void **state) {
  (void)state;
  double *h[3];
  for (int r = 0; r < 3; ++r) {
    ct_manual_seed(r == 2 ? tu_seed() + 1 : tu_seed());
    ct_tensor *t = ct_rand(CT_SHAPE(64), CT_F32, tu_device);
    TU_CHECK(t);
    h[r] = tu_to_f64(t);
    ct_free(t);
  }
  int same01 = 0, same02 = 0;
  for (int i = 0; i < 64; ++i) {
    same01 += h[0][i] == h[1][i];
    same02 += h[0][i] == h[2][i];
  }
  assert_int_equal(same01, 64);
  assert_true(same02 < 4);
  for (int r = 0; r < 3; ++r) free(h[r]);
}

int main(int argc, char **argv) {
  // Before tu_init seeds it: the generator's state out of the box.
  ct_philox_reserve(ct_device_cpu(), 0, &pre_seed, &pre_offset);
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers),
      cmocka_unit_test(test_default_seed),
      cmocka_unit_test(test_seed_and_offsets),
      cmocka_unit_test(test_reserve_threads),
      cmocka_unit_test(test_rand_matches_recipe),
      cmocka_unit_test(test_rand_statistics),
      cmocka_unit_test(test_same_seed_same_numbers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
