// SPDX-License-Identifier: MIT
//
// unit.hostdev: the arithmetic both backends share (core/hostdev.h), compiled
// here as C, the CPU backend's dialect, against references written without
// it: Random123's published Philox 4x32-10 answers, and integer pow as a
// plain product that wraps mod 2^64 with PyTorch's rules for negative
// exponents. tests/unit/test_kernel_math.cu holds the CUDA-path compile of
// the same header (nvcc, C++17) to the same references and to the CPU's
// ct_philox4x32_10, so the two sides agree through one source.
#include <stdint.h>
#include <stdlib.h>

#include "hostdev.h"
#include "testutil.h"

static void test_philox_known_answers(void **state) {
  (void)state;
  // Random123's kat_vectors, "philox4x32 10": counter[4] key[2] -> output[4].
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
       0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
       0x24126ea1},
  };
  for (int v = 0; v < 3; ++v) {
    uint32_t a[4], b[4];
    const uint32_t key[2] = {kat[v][4], kat[v][5]};
    cti_philox4x32_10(kat[v], kat[v][4], kat[v][5], a);
    ct_philox4x32_10(kat[v], key, b); // the public entry, random.h
    for (int i = 0; i < 4; ++i) {
      if (a[i] != kat[v][6 + i]) fail_msg("vector %d word %d: 0x%08x, expected 0x%08x", v, i, a[i], kat[v][6 + i]);
      if (b[i] != kat[v][6 + i]) fail_msg("ct_philox4x32_10 vector %d word %d: 0x%08x", v, i, b[i]);
    }
  }
}

// base^e by e multiplications in uint64_t (wraps mod 2^64), e >= 0.
static int64_t pow_by_products(int64_t base, int64_t e) {
  uint64_t r = 1;
  for (int64_t i = 0; i < e; ++i) r *= (uint64_t)base;
  return (int64_t)r;
}

static void test_ipow(void **state) {
  (void)state;
  for (int64_t base = -7; base <= 7; ++base)
    for (int64_t e = 0; e <= 130; ++e)
      if (cti_ipow(base, e) != pow_by_products(base, e))
        fail_msg("%lld^%lld: %lld, expected %lld", (long long)base, (long long)e, (long long)cti_ipow(base, e),
                 (long long)pow_by_products(base, e));
  srand((unsigned)tu_seed());
  for (int t = 0; t < 20000; ++t) {
    const int64_t base = (int64_t)(((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 11) ^ (uint64_t)rand());
    const int64_t e = rand() % 200;
    if (cti_ipow(base, e) != pow_by_products(base, e)) fail_msg("%lld^%lld wraps wrongly", (long long)base, (long long)e);
  }
  // Known values: 3^40 mod 2^64 as int64, 2^63 and 2^64.
  assert_true(cti_ipow(3, 40) == INT64_C(-6289078614652622815));
  assert_true(cti_ipow(2, 63) == INT64_MIN);
  assert_true(cti_ipow(2, 64) == 0);
  // Negative exponents, PyTorch's integer pow: 1 for base 1, +-1 for -1, else 0.
  for (int64_t e = -5; e < 0; ++e) {
    assert_true(cti_ipow(1, e) == 1);
    assert_true(cti_ipow(-1, e) == ((e % 2) ? -1 : 1));
    assert_true(cti_ipow(2, e) == 0 && cti_ipow(-3, e) == 0 && cti_ipow(0, e) == 0);
  }
  assert_true(cti_ipow(-1, INT64_MIN) == 1);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_known_answers),
      cmocka_unit_test(test_ipow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
