// SPDX-License-Identifier: MIT
//
// crossdev test_rng (ctest crossdev.rng): the same seed gives the same
// numbers on every device. (Named rng, not random: tests/unit/test_random.c
// already owns the target name test_random.)
//
// Invariant checked (random.h): element i of a random tensor depends only on
// the seed, the generator's offset and i. With `--devices cpu` the CPU's
// ct_rand / ct_randn are compared with random.h's recipe recomputed here by
// a Philox 4x32-10 written in this file (its own known-answer check first),
// so the runtime's block function is not trusted. With `--devices cpu,cuda`
// the GPU's tensors must also be bit-identical to the CPU's for ct_rand, and
// equal within 1e-6 relative (one ulp of f16/bf16) for ct_randn, whose
// log/sin/cos come from two different math libraries. Sizes are odd on
// purpose (1, 3, 4097) and one is large enough for the CPU's threads and
// many GPU blocks (100003).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

#define TWO_PI 6.283185307179586476925286766559

static const ct_dtype float_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16};
#define NFDT 4
static const int64_t sizes[] = {1, 3, 4097, 100003};
#define NSIZES 4

// ---- an independent Philox 4x32-10 (Salmon et al., SC'11) -----------------------------
// Written in the paper's terms: a round is two 32x32->64 multiplies whose
// halves are crossed and xored with the key; the key is bumped between
// rounds. Kept apart from common/core/random.c on purpose.
static void my_philox(const uint32_t in[4], const uint32_t key_in[2], uint32_t out[4]) {
  uint32_t x[4] = {in[0], in[1], in[2], in[3]};
  uint32_t k[2] = {key_in[0], key_in[1]};
  for (int r = 0; r < 10; ++r) {
    uint64_t a = (uint64_t)x[0] * 0xD2511F53u; // M0 on lane 0
    uint64_t b = (uint64_t)x[2] * 0xCD9E8D57u; // M1 on lane 2
    uint32_t y[4];
    y[0] = (uint32_t)(b >> 32) ^ x[1] ^ k[0];
    y[1] = (uint32_t)(b & 0xffffffffu);
    y[2] = (uint32_t)(a >> 32) ^ x[3] ^ k[1];
    y[3] = (uint32_t)(a & 0xffffffffu);
    memcpy(x, y, sizeof x);
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  memcpy(out, x, sizeof x);
}

static void test_reference_philox_kat(void **state) {
  (void)state;
  // Random123 kat_vectors, "philox4x32 10" (the pi-digits line).
  const uint32_t c[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  const uint32_t k[2] = {0xa4093822, 0x299f31d0};
  const uint32_t want[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  uint32_t out[4];
  my_philox(c, k, out);
  for (int i = 0; i < 4; ++i) assert_int_equal(out[i], want[i]);
}

static double rec_uniform(uint64_t seed, uint64_t offset, int64_t i) {
  const uint32_t key[2] = {(uint32_t)(seed & 0xffffffffu), (uint32_t)(seed >> 32)};
  const uint64_t c = offset + (uint64_t)(i / 4);
  const uint32_t ctr[4] = {(uint32_t)(c & 0xffffffffu), (uint32_t)(c >> 32), 0, 0};
  uint32_t out[4];
  my_philox(ctr, key, out);
  return ldexp((double)(out[i % 4] >> 8), -24);
}

// The uniform of dtype dt: its top p bits (random.h), exact in dt.
static double rec_uniform_dt(uint64_t seed, uint64_t offset, int64_t i, ct_dtype dt) {
  int p = dt == CT_F16 ? 11 : dt == CT_BF16 ? 8 : 24;
  double u24 = rec_uniform(seed, offset, i); // (u32 >> 8) * 2^-24
  return floor(ldexp(u24, p)) * ldexp(1.0, -p);
}

static double rec_normal(uint64_t seed, uint64_t offset, int64_t i) {
  const int64_t j = i - (i % 2);
  const double u0 = rec_uniform(seed, offset, j), u1 = rec_uniform(seed, offset, j + 1);
  const double r = sqrt(-2.0 * log(1.0 - u0));
  return i % 2 ? r * sin(TWO_PI * u1) : r * cos(TWO_PI * u1);
}

// ---- the CPU against the recipe -----------------------------------------------------------
static void test_cpu_matches_recipe(void **state) {
  (void)state;
  const ct_device cpu = ct_device_cpu();
  for (int k = 0; k < NFDT; ++k)
    for (int s = 0; s < NSIZES; ++s) {
      ct_dtype dt = float_dtypes[k];
      int64_t n = sizes[s];
      uint64_t seed = tu_seed() ^ ((uint64_t)(k * NSIZES + s) << 40);
      ct_manual_seed(seed);
      ct_tensor *u = ct_rand(CT_SHAPE(n), dt, cpu);
      ct_tensor *z = ct_randn(CT_SHAPE(n), dt, cpu);
      TU_CHECK(u);
      TU_CHECK(z);
      uint64_t zoff = (uint64_t)(n + 3) / 4; // randn came second
      double *hu = tu_to_f64(u), *hz = tu_to_f64(z);
      for (int64_t i = 0; i < n; ++i) {
        double ru = rec_uniform_dt(seed, 0, i, dt);
        double rz = ref_cast(rec_normal(seed, zoff, i), dt);
        // Every dtype holds its uniform exactly, below 1.
        if (!(hu[i] >= 0.0 && hu[i] < 1.0) || hu[i] != ru)
          fail_msg("ct_rand %s n=%lld [%lld]: %.9g, recipe %.9g", ct_dtype_name(dt), (long long)n,
                   (long long)i, hu[i], ru);
        double tol = dt == CT_F64 ? 1e-13 * fabs(rz)
                     : dt == CT_F32 ? 1e-6 * fabs(rz)
                                    : 2.0 * ref_eps(dt) * fabs(rz) + (dt == CT_F16 ? 0x1p-24 : 0.0);
        if (!(fabs(hz[i] - rz) <= tol))
          fail_msg("ct_randn %s n=%lld [%lld]: %.9g, recipe %.9g", ct_dtype_name(dt), (long long)n,
                   (long long)i, hz[i], rz);
      }
      free(hu);
      free(hz);
      ct_free(u);
      ct_free(z);
    }
}

// ---- the GPU against the CPU --------------------------------------------------------------
// The tensor's raw elements (its own dtype) in a malloc'd host buffer.
static void *raw(const ct_tensor *t) {
  size_t nb = ct_nbytes(t);
  void *p = malloc(nb ? nb : 1);
  if (!p) fail_msg("out of host memory");
  TU_OK(ct_copy_to_host(t, p, nb));
  return p;
}

static void test_devices_agree(void **state) {
  (void)state;
  if (tu_ndevices < 2) {
    skip(); // `--devices cpu`: test_cpu_matches_recipe is the check
    return;
  }
  const ct_device cpu = tu_devices[0], gpu = tu_devices[1];
  for (int k = 0; k < NFDT; ++k)
    for (int s = 0; s < NSIZES; ++s) {
      ct_dtype dt = float_dtypes[k];
      int64_t n = sizes[s];
      ct_manual_seed(tu_seed() + (uint64_t)(k * NSIZES + s));
      ct_tensor *t[2][2]; // [device][uniform, normal]
      for (int d = 0; d < 2; ++d) {
        ct_device dev = d ? gpu : cpu;
        t[d][0] = ct_rand(CT_SHAPE(n), dt, dev);
        TU_CHECK(t[d][0]);
        t[d][1] = ct_randn(CT_SHAPE(n), dt, dev);
        TU_CHECK(t[d][1]);
      }
      // Both generators moved by the same counters.
      assert_true(ct_philox_offset(cpu) == ct_philox_offset(gpu));
      assert_true(ct_philox_offset(cpu) == 2 * (uint64_t)((n + 3) / 4));

      void *a = raw(t[0][0]), *b = raw(t[1][0]);
      size_t es = ct_dtype_size(dt);
      for (int64_t i = 0; i < n; ++i)
        if (memcmp((char *)a + i * es, (char *)b + i * es, es) != 0)
          fail_msg("ct_rand %s n=%lld: element %lld differs between cpu and %s", ct_dtype_name(dt),
                   (long long)n, (long long)i, "cuda");
      free(a);
      free(b);

      double *zc = tu_to_f64(t[0][1]);
      double rtol = (dt == CT_F32 || dt == CT_F64) ? 1e-6 : 2.0 * ref_eps(dt);
      double atol = dt == CT_F16 ? 0x1p-24 : 1e-30;
      char what[64];
      snprintf(what, sizeof what, "ct_randn %s n=%lld cuda vs cpu", ct_dtype_name(dt), (long long)n);
      tu_assert_close(t[1][1], zc, rtol, atol, what);
      free(zc);
      for (int d = 0; d < 2; ++d) {
        ct_free(t[d][0]);
        ct_free(t[d][1]);
      }
    }
}

// Interleaving devices does not disturb either stream: the GPU's second
// tensor equals the CPU's second tensor even with other work in between.
static void test_streams_are_per_device(void **state) {
  (void)state;
  if (tu_ndevices < 2) {
    skip();
    return;
  }
  const ct_device cpu = tu_devices[0], gpu = tu_devices[1];
  ct_manual_seed(tu_seed());
  ct_tensor *c1 = ct_rand(CT_SHAPE(10), CT_F32, cpu);
  ct_tensor *c2 = ct_rand(CT_SHAPE(257), CT_F32, cpu);
  ct_tensor *g1 = ct_rand(CT_SHAPE(10), CT_F32, gpu);
  ct_tensor *extra = ct_rand(CT_SHAPE(1000), CT_F32, cpu); // moves only the CPU's offset
  ct_tensor *g2 = ct_rand(CT_SHAPE(257), CT_F32, gpu);
  TU_CHECK(c1);
  TU_CHECK(c2);
  TU_CHECK(g1);
  TU_CHECK(extra);
  TU_CHECK(g2);
  double *hc = tu_to_f64(c2);
  tu_assert_close(g2, hc, 0, 0, "second cuda tensor vs second cpu tensor");
  free(hc);
  ct_free(c1);
  ct_free(c2);
  ct_free(g1);
  ct_free(extra);
  ct_free(g2);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_philox_kat),
      cmocka_unit_test(test_cpu_matches_recipe),
      cmocka_unit_test(test_devices_agree),
      cmocka_unit_test(test_streams_are_per_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
