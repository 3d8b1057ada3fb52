// SPDX-License-Identifier: MIT
//
// philox: the Philox 4x32-10 block function and random.h's recipe for turning
// its output into uniform and normal numbers, for device (and host) code.
//
// Invariant: the block function is the CPU's own (core/hostdev.h), and the
// recipe is the CPU backend's operation for operation, so that a seed gives
// the same bits on every device. Nothing here may depend on the thread computing it.
#ifndef CT_PHILOX_CUH
#define CT_PHILOX_CUH

#include <stdint.h>

#include "hostdev.h"
#include "kernel_util.cuh"

// The block function is hostdev.h's cti_philox4x32_10, the CPU's too.

// The four uniforms of counter number c (= offset + i/4) of the stream keyed
// by `seed`: u[l] is element 4*(c - offset) + l's uniform, (u32 >> 8) * 2^-24.
// With `bits` < 24 (float16: 11, bfloat16: 8) the uniform keeps only the top
// `bits` bits, (u32 >> (32 - bits)) * 2^-bits, exact in that dtype and < 1.
__host__ __device__ inline void cti_philox_uniform4(uint64_t seed, uint64_t c, double u[4],
                                                   int bits = 24) {
  const uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u};
  uint32_t x[4];
  cti_philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), x);
  const double scale = 1.0 / (double)(1u << bits);
  for (int l = 0; l < 4; ++l) u[l] = (double)(x[l] >> (32 - bits)) * scale;
}

// The uniform's significand bits for dtype D (random.h's recipe).
template <ct_dtype D> __host__ __device__ constexpr int cti_uniform_bits() {
  return D == CT_F16 ? 11 : D == CT_BF16 ? 8 : 24;
}

// Box-Muller in double on the uniforms of elements 2j (u0) and 2j+1 (u1).
// 1 - u0 is in (0, 1], so the log is finite.
__host__ __device__ inline void cti_box_muller(double u0, double u1, double *z0, double *z1) {
  const double r = sqrt(-2.0 * log(1.0 - u0));
  const double theta = 2.0 * 3.14159265358979323846 * u1;
  *z0 = r * cos(theta);
  *z1 = r * sin(theta);
}

// Writes the (up to) four elements of counter number q of a random tensor
// out (n, contiguous) [D]: elements 4q .. 4q+3 that are < n, uniforms, or
// normals when `normal`. Normal pairs (2j, 2j+1) never straddle two counters
// (4q is even); for an odd n the last element 2j = n-1 takes z0, and its
// partner's uniform (element n, past the end) comes from the same counter.
template <ct_dtype D>
__host__ __device__ inline void cti_random_counter(cti_T<D> *out, int64_t n, uint64_t seed, uint64_t offset,
                                                  int64_t q, bool normal) {
  double u[4];
  cti_philox_uniform4(seed, offset + (uint64_t)q, u, normal ? 24 : cti_uniform_bits<D>());
  const int64_t base = 4 * q; // element index of lane 0
  if (!normal) {
    for (int l = 0; l < 4; ++l)
      if (base + l < n) out[base + l] = cti_convert<D>(u[l]);
    return;
  }
  for (int p = 0; p < 2; ++p) { // pairs (base, base+1) and (base+2, base+3)
    const int64_t e = base + 2 * p;
    if (e >= n) break;
    double z0, z1;
    cti_box_muller(u[2 * p], u[2 * p + 1], &z0, &z1);
    out[e] = cti_convert<D>(z0);
    if (e + 1 < n) out[e + 1] = cti_convert<D>(z1);
  }
}

#endif
