// SPDX-License-Identifier: MIT
//
// hostdev: the arithmetic both backends run, written once, for C (the CPU
// backend, core/) and for CUDA C++17 (kernels/, as __host__ __device__).
//
// Invariant: a function here is the one definition of its rule; the CPU
// loops and the CUDA kernels include this header instead of keeping a copy,
// so a seed gives the same bits and an integer pow the same wrap on every
// device. Nothing here may depend on the thread computing it, allocate, or
// fail. tests/unit/test_hostdev.c checks the rules against independent
// references; tests/unit/test_kernel_math.cu checks that the CUDA-path
// compile of this header agrees with the CPU backend's.
//
// CTI_HD marks a function both sides compile: `__host__ __device__` under
// nvcc, nothing in C (the families' rule headers, amp_kernels.h,
// optim_kernels.h and transformer_kernels.h, use it too).
#ifndef CTI_HOSTDEV_H
#define CTI_HOSTDEV_H

#include <stdint.h>

#ifdef __CUDACC__
#define CTI_HD __host__ __device__
#else
#define CTI_HD
#endif

// ---- Philox 4x32-10 -----------------------------------------------------------
// Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3"
// (SC'11), with the constants of Random123's philox.h. One round maps
// (c0, c1, c2, c3) with key (k0, k1) to
//   (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0))
// and the key is bumped by the Weyl constants between rounds.
#define CTI_PHILOX_M0 UINT32_C(0xD2511F53)
#define CTI_PHILOX_M1 UINT32_C(0xCD9E8D57)
#define CTI_PHILOX_W0 UINT32_C(0x9E3779B9) // golden ratio
#define CTI_PHILOX_W1 UINT32_C(0xBB67AE85) // sqrt(3) - 1

static inline CTI_HD void cti_philox4x32_10(const uint32_t ctr[4], uint32_t k0, uint32_t k1, uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += CTI_PHILOX_W0;
      k1 += CTI_PHILOX_W1;
    }
    const uint64_t p0 = (uint64_t)CTI_PHILOX_M0 * c0;
    const uint64_t p1 = (uint64_t)CTI_PHILOX_M1 * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = (uint32_t)p1;
    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = (uint32_t)p0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// ---- integer pow ----------------------------------------------------------------
// base^e with wrap-around (mod 2^64, two's complement), as PyTorch's integer
// pow; a negative exponent gives 1 for base 1, +-1 for base -1, else 0.
static inline CTI_HD int64_t cti_ipow(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2) ? -1 : 1;
    return 0;
  }
  uint64_t r = 1, b = (uint64_t)base;
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return (int64_t)r;
}

#endif
